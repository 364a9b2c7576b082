"""A tiny detector on a random word-level Llama and a real uvicorn server on a free loopback port.

Fixtures of the serving tests.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import numpy as np
import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION
from halluprobe import Detector
from halluprobe.features._extract import ProxyExtractor
from halluprobe.features._reads import detector_reads
from halluprobe.features._records import reduce_forward
from halluprobe.training._protocol import fit_blocks, make_blocks
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = [f"w{i}" for i in range(90)]
ASTRAL = ["\U0001f600", "\U0001f600" * 2, "\U0001f600" * 4]
"""Words outside the Basic Multilingual Plane (two UTF-16 units per emoji), for the page's offsets."""
TEMPLATE = (
    "{% for m in messages %}{{ m.role }} : {{ m.content }} ; {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def tokenizer(astral: bool = False) -> PreTrainedTokenizerFast:
    """The word-level tokenizer of the tiny proxy; ``astral`` adds the `ASTRAL` words (ids the model never
    generates otherwise decode to nothing, which the streaming tests rely on)."""
    words = ["[UNK]", "user", "assistant", ":", ";", "</s>", *WORDS, *(ASTRAL if astral else ())]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>", pad_token="[UNK]"
    )
    fast.chat_template = TEMPLATE
    return fast


def text(rng, n: int) -> str:
    return " ".join(rng.choice(WORDS, n))


class Ex:
    def __init__(self, id, context, question, answer):
        self.id, self.context, self.question, self.answer = id, context, question, answer


def tiny_model(layers: int = 3, max_positions: int = 256) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=layers, initializer_range=0.3, max_position_embeddings=max_positions,
    )  # fmt: skip
    cfg._attn_implementation = ATTN_IMPLEMENTATION
    return LlamaForCausalLM(cfg).eval()


def tiny_detector(
    feature_set: str = "A7L9", *, heads=(0, 5), layers: int = 3, hidden_layers=None, astral: bool = False
) -> Detector:
    """A detector of ``feature_set`` fitted on 40 random examples of the tiny proxy (bound to it)."""
    ext = ProxyExtractor(tiny_model(layers), tokenizer(astral), hidden_layers=hidden_layers)
    rng = np.random.default_rng(0)
    encoded = [ext.encode(Ex(f"e{i}", text(rng, 12), text(rng, 3), text(rng, 5))) for i in range(40)]
    recs = []
    for i in range(0, 40, 8):
        recs += reduce_forward(ext.forward(encoded[i : i + 8]), [f"e{j}" for j in range(i, i + 8)])
    y = np.arange(40) % 2
    blocks = make_blocks(feature_set, heads=list(heads), k=2)
    fit = fit_blocks(blocks, feature_set, recs[:24], y[:24], recs[24:], y[24:])
    det = Detector.from_probe(fit, hidden_layers=ext.hidden_layers)
    ext.reads = detector_reads(det, layers, 4)  # what Detector.extractor() sets on a loaded proxy
    det._extractor = ext
    return det


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(app, port: int | None = None):
    """Serve ``app`` with uvicorn on 127.0.0.1 in a thread, as ``halluprobe serve`` configures it (its
    timeouts and message bound); yields (base url, uvicorn.Server)."""
    import uvicorn
    from halluprobe.serving.server import uvicorn_config

    port = port or free_port()
    config = uvicorn_config(app, app.state.config, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def detector() -> Detector:
    return tiny_detector()


@pytest.fixture
def serve():
    """``serve(detector, **config)``: a context manager running the real app; yields (url, server, app)."""
    from halluprobe.serving import ScoringService, ServeConfig, create_app

    @contextlib.contextmanager
    def start(det: Detector, **config):
        app = create_app(ScoringService(det), ServeConfig(**config))
        with running(app) as (url, server):
            yield url, server, app

    return start


class Browser:
    """Headless Chromium driven over the DevTools protocol (loopback only; no extra package)."""

    def __init__(self, executable: str, profile) -> None:
        import subprocess

        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "--window-size=1000,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not start")
            time.sleep(0.1)
        import httpx
        from websockets.sync.client import connect

        port = int(port_file.read_text().split()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json() if t["type"] == "page"]
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(pages[0]["webSocketDebuggerUrl"], max_size=None))
        self.n = 0

    def call(self, method: str, **params):
        import json

        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg["result"]

    def js(self, expression: str):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.js(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.05)

    def close(self) -> None:
        self._stack.close()
        self.proc.terminate()
        self.proc.wait(30)
