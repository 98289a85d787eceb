"""The OpenAI-compatible server of ``ortstate serve LLM_DIR``: an LLM folder's generations on a
:class:`~ortstate.generate.ContinuousBatcher`, with conversations kept between turns."""
