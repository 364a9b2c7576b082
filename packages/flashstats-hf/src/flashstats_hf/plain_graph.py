"""The plain decoder forward (no statistics) replayed from a CUDA graph, with the causal mask left to SDPA.

Capturing a Transformers model that uses ``attn_implementation="sdpa"`` makes it slower than eager at
long context: while a stream is being captured, Transformers cannot check the attention mask for padding
(a host read), so it builds the dense ``[1, 1, L, L]`` causal mask, and SDPA with an explicit mask cannot
run its FlashAttention backend. Under ``"attnstats"`` the mask function hands over no mask for an unpadded
input, so the captured layers call SDPA with ``is_causal=True``, as an eager forward does.
[`GraphedForward`][flashstats_hf.GraphedForward] captures that forward once per input length.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from flashstats_hf._inputs import _decoder
from flashstats_hf._packing import unpacked_positions
from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    ids: torch.Tensor  # [1, L] static token ids
    out: torch.Tensor  # [1, L, Dm] static last hidden state


class GraphedForward:
    """The decoder body's plain forward replayed from CUDA graphs, one per input length.

    Args:
        model: a Transformers causal LM (or its decoder body) on a CUDA device, in eval mode, with
            ``attn_implementation="attnstats"`` (plain SDPA outside a recorded forward).
        max_graphs: captured lengths kept (least recently used ones are dropped with their memory).

    Raises:
        ValueError: a model not on CUDA, not in eval mode or not using ``"attnstats"``, or a bad
            ``max_graphs``.
    """

    def __init__(self, model: torch.nn.Module, *, max_graphs: int = 4) -> None:
        register_flashstats()
        device = next(model.parameters()).device
        if device.type != "cuda":
            raise ValueError(f"GraphedForward needs a model on a CUDA device, got {device}")
        if model.training or getattr(model.config, "_attn_implementation", None) != ATTN_IMPLEMENTATION:
            raise ValueError(f"model must be in eval mode with attn_implementation={ATTN_IMPLEMENTATION!r}")
        if isinstance(max_graphs, bool) or not isinstance(max_graphs, int) or max_graphs < 1:
            raise ValueError(f"max_graphs must be a positive int, got {max_graphs!r}")
        self.body, _ = _decoder(model)
        self.device, self.max_graphs = device, max_graphs
        self._graphs: OrderedDict[int, _Graph] = OrderedDict()

    def _run(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), unpacked_positions():
            return self.body(input_ids=ids, use_cache=False)[0]

    def _capture(self, length: int) -> _Graph:
        ids = torch.zeros(1, length, dtype=torch.int64, device=self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up: lazy initialisation, kernel selection
            for _ in range(2):
                self._run(ids)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._run(ids)
        return _Graph(graph=graph, ids=ids, out=out)

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Replays (capturing on first use of its length) the plain forward of one unpadded example.

        Args:
            input_ids: [1, L] integer token ids, no padding.

        Returns:
            torch.Tensor: ``[1, L, Dm]``, the body's last hidden state; a view of the graph's static output,
            which the next call of the same length overwrites (clone it to keep it).
        """
        from flashstats_hf.graphs import check_graph_input

        check_graph_input(input_ids)
        length = input_ids.shape[1]
        if length not in self._graphs:
            while len(self._graphs) >= self.max_graphs:
                self._graphs.popitem(last=False)
            self._graphs[length] = self._capture(length)
        self._graphs.move_to_end(length)
        cap = self._graphs[length]
        cap.ids.copy_(input_ids, non_blocking=True)
        cap.graph.replay()
        return cap.out


__all__ = ["GraphedForward"]
