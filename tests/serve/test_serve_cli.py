"""``ortstate serve`` as a process: SIGTERM parks every stream and exits 0, a server started again on
the same state directory resumes each stream exactly; one-line errors; ``--bench``."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
from conftest import MODEL, Lone, assert_same, feeds, running, serving
from oracle import REPO, assert_one_line_error, run_cli

from ortstate.errors import ServeError
from ortstate.serve import AsyncClient, Client


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err == ""
    return out


def test_sigterm_parks_every_stream_and_a_restarted_server_resumes_them(tmp_path):
    rng = np.random.default_rng(10)
    lones = [Lone() for _ in range(3)]
    with serving("--state-dir", str(tmp_path)) as (proc, url):
        client = Client(url)
        streams = [client.open() for _ in lones]
        for _ in range(3):
            for stream, lone in zip(streams, lones):
                fed = feeds(rng, 2)
                assert_same(stream.step(fed), lone.step(fed))
        ids = [s.id for s in streams]
        assert _stop(proc).splitlines()[-1] == f"ortstate serve: stopped; 3 streams parked in {tmp_path}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{i}.npz" for i in ids)

    # Started again with room for two streams only: the third is refused with a reason, until one closes.
    with serving("--state-dir", str(tmp_path), "--max-streams", "2") as (proc, url):
        client = Client(url)
        resumed = [client.stream(i) for i in ids]
        for stream, lone in zip(resumed[:2], lones):
            fed = feeds(rng)
            assert_same(stream.step(fed), lone.step(fed), "after the restart")
        with pytest.raises(ServeError) as info:
            resumed[2].step(feeds(rng))
        assert info.value.code == 4503 and "server full: it holds 2 of --max-streams 2 streams" in str(info.value)
        resumed[0].close()
        fed = feeds(rng)
        assert_same(client.stream(ids[2]).step(fed), lones[2].step(fed), "once a slot is free")
        _stop(proc, signal.SIGINT)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{i}.npz" for i in ids[1:])


def test_sigterm_mid_run_loses_no_step(tmp_path):
    """Six clients step as fast as they can; SIGTERM lands among their steps. A step that got its
    reply was made, one that did not was not: each stream continues after a restart exactly where
    its replies say it is."""
    count, most = 6, 400
    rng = np.random.default_rng(12)
    plan = [[feeds(rng) for _ in range(most)] for _ in range(count)]
    got: list[list] = [[] for _ in range(count)]
    ended: list[ServeError | None] = [None] * count
    with serving("--state-dir", str(tmp_path)) as (proc, url):
        client = Client(url)
        streams = [client.open() for _ in range(count)]

        def drive(k: int) -> None:
            try:
                for fed in plan[k]:
                    got[k].append(streams[k].step(fed))
            except ServeError as exc:
                ended[k] = exc

        threads = [threading.Thread(target=drive, args=(k,), daemon=True) for k in range(count)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while min(len(g) for g in got) < 5:
            assert time.monotonic() < deadline, "the clients did not get going"
            time.sleep(0.01)
        _stop(proc)
        for t in threads:
            t.join(30)
    assert all(e is not None for e in ended), "a client finished before SIGTERM: give it more steps"
    with serving("--state-dir", str(tmp_path)) as (proc, url):
        client = Client(url)
        for k, stream in enumerate(streams):
            again, made = client.stream(stream.id), len(got[k])
            got[k] += [again.step(fed) for fed in plan[k][made : made + 3]]
        _stop(proc)
    for k in range(count):
        lone = Lone()
        for n, outputs in enumerate(got[k]):
            assert_same(outputs, lone.step(plan[k][n]), f"stream {k}, step {n}")


def test_without_a_state_dir_streams_end_with_the_server():
    with serving() as (proc, url):
        stream = Client(url).open()
        stream.step(feeds(np.random.default_rng(11)))
        assert _stop(proc).splitlines()[-1] == "ortstate serve: stopped"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "serve needs a MODEL to serve, or --bench URL (see 'ortstate serve --help')"),
        (
            [MODEL, "--host", "0.0.0.0"],
            "refusing to listen on 0.0.0.0 without a token: anyone who reaches it could use the model; give "
            "--token (or ORTSTATE_SERVE_TOKEN), or listen on 127.0.0.1",
        ),
        ([MODEL, "--token", ""], "the token is empty: give a secret of your own with --token or ORTSTATE_SERVE_TOKEN"),
        ([MODEL, "--idle-park", "5"], "--idle-park needs --state-dir: parked streams are written there"),
        ([MODEL, "--max-streams", "0"], "--max-streams must be positive, got 0"),
        ([MODEL, "--max-delay-ms", "-2"], "--max-delay-ms / 1000 must be >= 0, got -0.002"),
        ([MODEL, "--durable"], "--durable needs --state-dir: its log is kept there"),
        ([MODEL, "--ray"], "--ray needs --state-dir: a folder every replica reaches, where streams move between them"),
        ([MODEL, "--ray", "--state-dir", "unused", "--handoff", "0"], "--handoff must be positive, got 0.0"),
        ([MODEL, "--ray", "--state-dir", "unused", "--replicas", "0"], "--replicas must be positive, got 0"),
        ([MODEL, "--port", "70000"], "--port must be 0..65535, got 70000"),
        (
            [MODEL, "--allow-origin", "http://localhost:3000", "--allow-origin", "*"],
            "--allow-origin takes origins as browsers send them, scheme://host[:port] (http or https, no path, "
            "no '*'), got '*'",
        ),
        (
            ["--bench", "http://127.0.0.1:1", "--allow-origin", "http://a"],
            "--allow-origin is a server's: --bench sends no Origin",
        ),
        (["nowhere.xml"], "nowhere.xml: no such file"),
        ([MODEL, "--state-dir", MODEL], f"--state-dir {MODEL}: File exists"),
        ([MODEL, "--bench", "http://127.0.0.1:1"], "--bench drives a running server: give its URL, not a MODEL"),
        (
            ["--bench", "ftp://x"],
            "ftp://x: a server URL starts with http:// or https://",
        ),
    ],
)
def test_usage_errors_are_one_line(capsys, args, error):
    code, out, err = run_cli(capsys, "serve", *args)
    assert code == (1 if "URL starts" in error else 2) and out == ""
    assert_one_line_error(err, error)


def test_the_docs_curl_lines():
    """docs/serve-streams.md's curl lines, run against ``ortstate serve`` on the port it got: the
    model as one stream sees it, and a new stream."""
    section = (REPO / "docs" / "serve-streams.md").read_text(encoding="utf-8").split("## Call")[1]
    block = next(b for b in section.split("```bash\n")[1:] if b.startswith("curl ")).split("```")[0]
    with serving() as (proc, url):
        assert all("http://127.0.0.1:8000/" in line for line in block.splitlines())
        said = [
            subprocess.run(["bash", "-c", line.replace("http://127.0.0.1:8000", url)], capture_output=True, text=True)
            for line in block.splitlines()
        ]
        _stop(proc)
    assert [s.returncode for s in said] == [0, 0], [s.stderr for s in said]
    model, opened = (json.loads(s.stdout) for s in said)
    assert model["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, None, 8]}]
    assert sorted(opened) == ["durable", "id"] and opened["durable"] is False and len(opened["id"]) == 22


def test_a_taken_port_is_one_line(capsys):
    with running(slots=1) as server:
        port = server.url.rsplit(":", 1)[1]
        code, _, err = run_cli(capsys, "serve", MODEL, "--port", port)
    assert code == 2
    assert_one_line_error(err, f"cannot listen on 127.0.0.1:{port}: Address already in use")


def test_bench_drives_a_server(capsys):
    with running(slots=8, max_delay=0.01) as server:
        code, out, err = run_cli(capsys, "serve", "--bench", server.url, "--streams", "4", "--steps", "5")
        assert server.service.stats()["streams_open"] == 0 and server.service.stats()["steps"] == 20
    assert code == 0, err
    assert re.fullmatch(
        r"4 streams × 5 steps: [\d,]+ steps/s, step latency p50 [\d.]+ ms, p99 [\d.]+ ms; "
        r"the server's mean batch [\d.]+\n",
        out,
    ), out


def test_bench_against_no_server_is_one_line(capsys):
    with running(slots=1) as server:
        url = server.url
    code, _, err = run_cli(capsys, "serve", "--bench", url, "--streams", "1", "--steps", "1")
    assert code == 1
    assert err.startswith(f"ortstate: error: {url}/v1/model: cannot reach the server (") and err.count("\n") == 1


def test_the_token_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ORTSTATE_SERVE_TOKEN", "from-env")
    from ortstate.cli import build_parser

    assert build_parser().parse_args(["serve", str(MODEL)]).token == "from-env"
    assert build_parser().parse_args(["serve", str(MODEL), "--token", "given"]).token == "given"


def test_256_streams_of_50_steps_each_equal_lone_sessions():
    """The issue's load: 256 concurrent streams × 50 steps through the WebSocket API of a server
    process, every output as a lone stream's, the steps batched."""
    count, steps = 256, 50
    rng = np.random.default_rng(13)
    plan = rng.normal(0, 1, (count, steps, 1, 1, 8)).astype(np.float32)

    async def drive(client: AsyncClient, k: int) -> list:
        stream = await client.open()
        got = [await stream.step({"x": plan[k, n]}) for n in range(steps)]
        await stream.close()
        return got

    async def main(url: str) -> tuple[list, dict]:
        client = AsyncClient(url)
        results = await asyncio.gather(*(drive(client, k) for k in range(count)))
        return results, await client.stats()

    with serving("--max-streams", str(count), "--max-delay-ms", "5") as (proc, url):
        results, stats = asyncio.run(main(url))
        _stop(proc)
    assert stats["steps"] == count * steps and stats["errors"] == 0 and stats["max_batch"] > 1
    for k in range(count):
        lone = Lone()
        for n in range(steps):
            assert_same(results[k][n], lone.step({"x": plan[k, n]}), f"stream {k}, step {n}")
