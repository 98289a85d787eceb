"""Layouts for other tools: an optimum-intel LLM folder as a folder onnxruntime-genai or optimum's
``ORTModelForCausalLM`` loads as it is (``ortstate export``)."""

from .layouts import LAYOUTS, MODEL_FILE, Exported, ExportNotice, export

__all__ = ["LAYOUTS", "MODEL_FILE", "ExportNotice", "Exported", "export"]
