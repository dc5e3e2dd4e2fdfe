"""HFBackend's generation session: every row's KV cache kept across calls, prompt prefixes that
several rows share encoded once, and a decode loop with one seeded sampler per row.

A multi-turn rollout calls `generate` once per turn with every live episode's whole context. The
session remembers, for each row of its previous call, the keys and values of the tokens it fed (the
prompt and every sampled token but the last) and starts each new prompt from the remembered row
with the longest common prefix, so only the new tokens (the last sampled token, the observation,
the next assistant header) are encoded. Before a call is decoded, the prefix that all its distinct
prompts share (an environment's system prompt) and every prompt that several rows share (a GRPO
group's) are encoded once and remembered too, when they add at least MIN_SHARED_TOKENS tokens.

Layout. The rows of a call are decoded together in key/value buffers of fixed capacity per layer
(rows, kv heads, columns, head dim): row i's reused cache right-aligned in the first W columns (W
the longest reuse), its new tokens right-aligned in the next block, then one column per decode
step. Columns a row does not use are masked out (2-D attention mask, which transformers combines
with the causal mask by column) and explicit position ids keep each row's positions contiguous, so
the padding changes no row's values. The buffers are written in place (transformers' DynamicLayer
concatenates the whole cache at every step). After the call each row's used columns are copied out
compactly: rows are re-padded once per call, not once per token.

Shared prefix. When the rows of a batch reuse caches that begin with the same tokens (an
environment's system prompt, at least MIN_SHARED_TOKENS of them), those keys and values are held
once, not copied into every row: the buffers and the remembered caches hold only what follows
them, and the attention (`shared_prefix_attention`, given a 4-D mask causal within the fed block)
takes one softmax over the shared columns and the row's own.

Weights. On CPU the float32 `nn.Linear` weights are prepacked for oneDNN (`PackedLinears`), whose
kernels multiply the few rows of a decode step much faster than the default matmul; the backend
keeps the packed copies across its sessions (as much memory again as those weights) and packs a
weight again when it changes.

Caches hold the weights they were computed with: a session must not outlive an optimizer step.
Only decoder models whose every layer attends to the full context are supported (no sliding
window); transformers >= 5.x's `cache=` forward argument and Cache layer API are used.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from tracegym.generation import Completion, GenerationSession, SamplingConfig, sampling_seed
from tracegym.sampling import RowSampler, ends_with_stop

if TYPE_CHECKING:
    from tracegym.generation import HFBackend

MIN_SHARED_TOKENS = 32  # a shared prefix shorter than this costs an extra forward for little gain
SHARED_PREFIX_ATTENTION = "tracegym_shared_prefix"  # the attention implementation's name in transformers
PACK_ROWS = 16  # the batch size oneDNN lays packed weights out for (any number of rows works)


@dataclass
class CacheEntry:
    """A remembered cache of the tokens `ids`: `keys` (layers, kv heads, columns, key dim) and
    `values` (layers, kv heads, columns, value dim) of ids[start:], the first `start` tokens' being
    those of `prefix`, held once for the rows of a batch (start 0 without one)."""

    ids: np.ndarray
    keys: torch.Tensor
    values: torch.Tensor
    prefix: SharedPrefix | None = None

    @property
    def start(self) -> int:
        return self.prefix.length if self.prefix is not None else 0

    def columns(self, layer: int, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's keys and values of the tokens start..end-1, each (kv heads, end - start, dim)."""
        own = slice(max(start - self.start, 0), max(end - self.start, 0))
        keys, values = self.keys[layer, :, own], self.values[layer, :, own]
        if self.prefix is not None and start < self.start:
            held_keys, held_values = self.prefix.entry.columns(layer, start, min(end, self.start))
            keys, values = torch.cat([held_keys, keys], dim=1), torch.cat([held_values, values], dim=1)
        return keys, values


def _common_length(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def _onednn() -> bool:
    """Whether oneDNN's packed linear kernels are available."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _pack(weight: torch.Tensor) -> torch.Tensor:
    """A float32 CPU `weight` (out, in) laid out for `_onednn_linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_ROWS)


def _onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias), `packed` = _pack(weight)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


class SharedPrefix:
    """The cache of the tokens every row of a batch begins with (`entry`), held once, as the
    attention reads it: each layer's keys and values per kv head, packed for oneDNN on CPU in float32."""

    def __init__(self, entry: CacheEntry) -> None:
        self.entry, self.length = entry, len(entry.ids)
        self.packed: list[tuple[list[torch.Tensor], list[torch.Tensor]]] | None = None
        if _onednn() and entry.keys.device.type == "cpu" and entry.keys.dtype == torch.float32:
            self.packed = [
                ([_pack(k) for k in keys], [_pack(v.t()) for v in values])
                for keys, values in zip(entry.keys, entry.values)
            ]

    def scores(self, layer: int, queries: torch.Tensor) -> torch.Tensor:
        """The products of `queries` (kv heads, n, dim), float32, with the layer's keys: (kv heads, n, length)."""
        if self.packed is None:
            return queries @ self.entry.keys[layer].float().transpose(1, 2)
        return torch.stack([_onednn_linear(q, keys) for q, keys in zip(queries, self.packed[layer][0])])

    def mix(self, layer: int, weights: torch.Tensor) -> torch.Tensor:
        """`weights` (kv heads, n, length), float32, times the layer's values: (kv heads, n, dim)."""
        if self.packed is None:
            return weights @ self.entry.values[layer].float()
        return torch.stack([_onednn_linear(w, values) for w, values in zip(weights, self.packed[layer][1])])


def shared_prefix_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    scaling: float,
    dropout: float = 0.0,
    shared_prefix: SharedPrefix | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over a prefix that every row shares, then each row's own columns, in one softmax
    (a transformers attention function, registered as SHARED_PREFIX_ATTENTION).

    query (rows, heads, q, dim); key, value (rows, kv heads, columns, dim): the rows' own columns;
    attention_mask (rows, 1, q, columns) bool, True where a query sees a column; every query sees
    all of `shared_prefix`. Computed in float32; returns (rows, q, heads, dim) in the query's dtype,
    and no weights."""
    if shared_prefix is None or dropout or kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        raise ValueError("shared_prefix_attention needs shared_prefix, and supports no dropout, softcap or sinks")
    rows, heads, width, dim = query.shape
    kv_heads, layer = key.shape[1], module.layer_idx
    group = heads // kv_heads * width  # the queries of one kv head in one row
    queries = query.float().reshape(rows, kv_heads, group, dim) * scaling
    seen = attention_mask.expand(rows, heads // kv_heads, width, -1).reshape(rows, 1, group, -1)
    own = (queries @ key.float().transpose(2, 3)).masked_fill(~seen, float("-inf"))
    on_prefix = shared_prefix.scores(layer, queries.transpose(0, 1).reshape(kv_heads, rows * group, dim))
    weights = torch.cat([on_prefix, own.transpose(0, 1).reshape(kv_heads, rows * group, -1)], dim=-1).softmax(-1)
    from_prefix = shared_prefix.mix(layer, weights[..., : shared_prefix.length])
    from_own = weights[..., shared_prefix.length :].reshape(kv_heads, rows, group, -1).transpose(0, 1) @ value.float()
    output = from_prefix.view(kv_heads, rows, group, dim).transpose(0, 1) + from_own
    return output.reshape(rows, heads, width, dim).transpose(1, 2).to(query.dtype).contiguous(), None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)


@contextlib.contextmanager
def _attention(model: PreTrainedModel, implementation: str | None) -> Iterator[None]:
    """Run `model`'s attention as `implementation` inside the block (None: as it is)."""
    if implementation is None:
        yield
        return
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = implementation
    try:
        yield
    finally:
        config._attn_implementation = before


def _packed_linear(module: nn.Linear, packed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float32:
        return nn.functional.linear(x, module.weight, module.bias)
    return _onednn_linear(x, packed, module.bias)


class PackedLinears:
    """The float32 `nn.Linear` weights of a CPU model prepacked for oneDNN, used by those layers'
    forward inside `with` (the same products). `update(model)` packs what is new or changed since
    the last update (a weight replaced or modified in place), so one instance serves a backend's
    sessions across optimizer steps. Holds nothing where oneDNN is unavailable; layers whose forward
    is already replaced on the instance (accelerate hooks) are left alone."""

    def __init__(self) -> None:
        self.packed: dict[nn.Linear, tuple[torch.Tensor, int, torch.Tensor]] = {}  # weight, its version, packed
        self.active: list[nn.Linear] = []

    def update(self, model: nn.Module) -> PackedLinears:
        if not _onednn():
            return self
        packed = {}
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if (
                type(module) is nn.Linear
                and "forward" not in vars(module)
                and weight.device.type == "cpu"
                and weight.dtype == torch.float32
            ):
                known = self.packed.get(module)
                if known is None or known[0] is not weight or known[1] != weight._version:
                    known = (weight, weight._version, _pack(weight))
                packed[module] = known
        self.packed = packed
        return self

    def __enter__(self) -> PackedLinears:
        self.active = list(self.packed)
        for module in self.active:
            module.forward = functools.partial(_packed_linear, module, self.packed[module][2])
        return self

    def __exit__(self, *exc: object) -> None:
        for module in self.active:
            del module.forward
        self.active = []


class _BufferLayer(DynamicLayer):
    """One layer's keys and values for the rows of a `RowCache` batch: buffers of `capacity` columns,
    allocated on the first update (shapes from the model), the reused caches of `sources` after
    their first `shared` tokens copied into the first `width` columns, then written in place."""

    def __init__(
        self, index: int, sources: list[tuple[CacheEntry | None, int]], shared: int, width: int, capacity: int
    ) -> None:
        super().__init__()
        self.index, self.sources, self.shared = index, sources, shared
        self.width, self.capacity, self.length = width, capacity, width

    def _allocate(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        rows, heads, _, key_dim = key_states.shape
        # zeros, not empty: masked columns get weight 0, and 0 * NaN garbage would still be NaN
        self.key_buffer = key_states.new_zeros(rows, heads, self.capacity, key_dim)
        self.value_buffer = value_states.new_zeros(rows, heads, self.capacity, value_states.shape[-1])
        for row, (entry, reuse) in enumerate(self.sources):
            if reuse > self.shared:
                keys, values = entry.columns(self.index, self.shared, reuse)
                self.key_buffer[row, :, self.width - (reuse - self.shared) : self.width] = keys
                self.value_buffer[row, :, self.width - (reuse - self.shared) : self.width] = values
        self.sources = []  # let consumed entries be freed
        self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self._allocate(key_states, value_states)
        end = self.length + key_states.shape[-2]
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def keep(self, index: torch.Tensor) -> None:
        """Keep the rows `index` (in that order) and drop the others."""
        self.key_buffer, self.value_buffer = self.key_buffer[index], self.value_buffer[index]
        self.keys, self.values = self.key_buffer[:, :, : self.length], self.value_buffer[:, :, : self.length]


class RowCache:
    """Rows decoded together (layout in the module docstring): each starts from `sources[i]` =
    (entry, reused length) and may be fed up to `new_columns` tokens at once, then `steps` more.
    `shared` holds the first reused tokens once, the same in every row (None: nothing shared)."""

    def __init__(
        self,
        model: PreTrainedModel,
        sources: list[tuple[CacheEntry | None, int]],
        new_columns: int,
        steps: int,
        shared: SharedPrefix | None = None,
    ) -> None:
        self.model, self.device, self.shared = model, model.device, shared
        held = shared.length if shared is not None else 0
        width = max(reuse - held for _, reuse in sources)
        capacity = width + new_columns + steps
        self.valid = torch.zeros(len(sources), capacity, dtype=torch.bool, device=self.device)
        for row, (_, reuse) in enumerate(sources):
            self.valid[row, width - (reuse - held) : width] = True
        self.positions = [reuse for _, reuse in sources]
        self.column = width
        layers = model.config.get_text_config().num_hidden_layers
        self.cache = Cache(layers=[_BufferLayer(index, sources, held, width, capacity) for index in range(layers)])

    def feed(self, tokens: Sequence[Sequence[int]]) -> torch.Tensor:
        """Append each row's `tokens` (right-aligned in a block as wide as the longest; a row may
        feed none) and return the logits after each row's last token, (rows, vocab) float32."""
        width = max(len(t) for t in tokens)
        pads = [width - len(t) for t in tokens]
        ids = torch.tensor([[0] * pad + list(t) for pad, t in zip(pads, tokens)], dtype=torch.long)
        positions = torch.tensor(
            [[0] * pad + list(range(start, start + len(t))) for pad, t, start in zip(pads, tokens, self.positions)],
            dtype=torch.long,
        )
        block = torch.tensor([[False] * pad + [True] * len(t) for pad, t in zip(pads, tokens)], dtype=torch.bool)
        self.valid[:, self.column : self.column + width] = block.to(self.device)
        self.positions = [start + len(t) for start, t in zip(self.positions, tokens)]
        self.column += width
        mask, extra = self.valid[:, : self.column], {}
        if self.shared is not None:  # a 4-D mask goes to the attention as it is: causal within the block
            columns = torch.arange(self.column, device=self.device)
            causal = columns <= columns[self.column - width :, None]
            mask, extra = mask[:, None, None, :] & causal, {"shared_prefix": self.shared}
        with _attention(self.model, SHARED_PREFIX_ATTENTION if self.shared is not None else None):
            logits = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask,
                position_ids=positions.to(self.device),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
                **extra,
            ).logits
        return logits[:, -1].float()

    def keep(self, rows: Sequence[int]) -> None:
        """Keep the rows `rows` (in that order) and drop the others, after their last feed."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            layer.keep(index)
        self.valid, self.positions = self.valid[index], [self.positions[row] for row in rows]

    def entry(self, row: int, ids: Sequence[int]) -> CacheEntry:
        """Row `row`'s cache, compacted, as the remembered cache of `ids` (the tokens it was fed;
        the batch's shared prefix stays held once)."""
        columns = self.valid[row, : self.column].nonzero()[:, 0]
        held = self.shared.length if self.shared is not None else 0
        if held + len(columns) != len(ids):
            raise RuntimeError(f"row {row} holds {held + len(columns)} cached tokens, expected {len(ids)}")
        layers = self.cache.layers
        keys = torch.stack([layer.key_buffer[row][:, columns] for layer in layers])
        values = torch.stack([layer.value_buffer[row][:, columns] for layer in layers])
        return CacheEntry(np.asarray(ids, dtype=np.int64), keys, values, self.shared)


class KVSession(GenerationSession):
    """HFBackend's session (see the module docstring)."""

    def __init__(self, backend: HFBackend) -> None:
        super().__init__(backend)
        self.model, self.tokenizer, self.batch_size = backend.model, backend.tokenizer, backend.batch_size
        layer_types = getattr(self.model.config.get_text_config(), "layer_types", None) or []
        if any(kind != "full_attention" for kind in layer_types):
            raise ValueError(
                f"{type(self.model).__name__}: the hf backend supports full-attention layers only, "
                f"got {sorted(set(layer_types))}"
            )
        self.entries: list[CacheEntry | None] = []
        self.hold_shared = getattr(self.model, "_supports_attention_backend", False)  # attention is pluggable
        self.held: SharedPrefix | None = None  # the last batch's shared prefix
        backend.packed = backend.packed or PackedLinears()  # kept by the backend across its sessions
        self.packed: PackedLinears = backend.packed

    def close(self) -> None:
        self.entries, self.held = [], None

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> list[Completion]:
        if params.max_new_tokens is None:
            raise ValueError(
                "SamplingConfig.max_new_tokens is None: set it, or fit it to an environment with run_episodes"
            )
        prompts = [[int(token) for token in prompt] for prompt in prompts]
        if not all(prompts):
            raise ValueError("cannot generate from an empty prompt")
        seeds = self._row_seeds(len(prompts), params, seeds)
        with self.packed.update(self.model):
            return self._generate(prompts, params, seeds)

    def _generate(self, prompts: list[list[int]], params: SamplingConfig, seeds: list[int]) -> list[Completion]:
        self._share(prompts)
        plan = [self._reuse(prompt) for prompt in prompts]
        uses = Counter(index for index, _ in plan if index is not None)
        self.entries = [entry if uses[i] else None for i, entry in enumerate(self.entries)]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        first = np.asarray(prompts[0], dtype=np.int64)
        common = min(_common_length(first, np.asarray(prompt, dtype=np.int64)) for prompt in prompts)
        completions: list[Completion | None] = [None] * len(prompts)
        entries: list[CacheEntry | None] = [None] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            sources = [(self.entries[plan[i][0]] if plan[i][0] is not None else None, plan[i][1]) for i in chunk]
            rows = RowCache(
                self.model,
                sources,
                max(len(prompts[i]) - plan[i][1] for i in chunk),
                params.max_new_tokens,
                self._held_once(sources, common),
            )
            logits = rows.feed([prompts[i][plan[i][1] :] for i in chunk])
            for i in chunk:  # the buffers now hold what these rows reused
                if plan[i][0] is not None:
                    uses[plan[i][0]] -= 1
                    if not uses[plan[i][0]]:
                        self.entries[plan[i][0]] = None
            for i, completion, entry in zip(
                chunk, *self._decode(rows, logits, [prompts[i] for i in chunk], params, [seeds[i] for i in chunk])
            ):
                completions[i], entries[i] = completion, entry
        self.entries = entries
        return completions  # type: ignore[return-value]

    @staticmethod
    def _row_seeds(rows: int, params: SamplingConfig, seeds: Sequence[int] | None) -> list[int]:
        if seeds is not None:
            if len(seeds) != rows:
                raise ValueError(f"got {len(seeds)} seeds for {rows} prompts")
            return [int(seed) for seed in seeds]
        if params.seed is not None:
            return [sampling_seed(params.seed, row) for row in range(rows)]
        return torch.randint(0, 2**62, (rows,)).tolist()

    def _reuse(self, prompt: Sequence[int], limit: int | None = None) -> tuple[int | None, int]:
        """(index of the remembered entry sharing the longest prefix with `prompt`, tokens reused),
        reusing at most `limit` tokens (default len(prompt) - 1: the last token is always fed)."""
        limit = len(prompt) - 1 if limit is None else limit
        tokens = np.asarray(prompt, dtype=np.int64)
        best, reuse = None, 0
        for index, entry in enumerate(self.entries):
            if entry is not None and (length := min(_common_length(tokens, entry.ids), limit)) > reuse:
                best, reuse = index, length
        return best, reuse

    def _held_once(self, sources: list[tuple[CacheEntry | None, int]], common: int) -> SharedPrefix | None:
        """The cache of the first tokens of a batch that every row reuses, at most the `common` ones
        every prompt of the call begins with, to hold once (the previous batch's when it holds the
        same tokens, or the one the reused caches refer to); None when there are fewer than
        MIN_SHARED_TOKENS."""
        if not self.hold_shared or any(entry is None for entry, _ in sources):
            return None
        length = min([common] + [reuse for _, reuse in sources])
        if length < MIN_SHARED_TOKENS:
            return None
        entry = sources[0][0]
        if self.held is not None and np.array_equal(self.held.entry.ids, entry.ids[:length]):
            return self.held
        if entry.prefix is not None and entry.prefix.length == length:
            self.held = entry.prefix
        else:
            parts = [entry.columns(layer, 0, length) for layer in range(len(entry.keys))]
            keys, values = (torch.stack([part[i] for part in parts]) for i in (0, 1))
            self.held = SharedPrefix(CacheEntry(entry.ids[:length], keys, values))
        return self.held

    def _share(self, prompts: list[list[int]]) -> None:
        """Remember the prefix all distinct prompts share, and every prompt several rows share."""
        counts = Counter(tuple(prompt) for prompt in prompts)
        distinct = [np.asarray(prompt, dtype=np.int64) for prompt in counts]
        shared = [prompt[:-1] for prompt, count in counts.items() if count > 1]
        if len(distinct) > 1:
            common = min(_common_length(distinct[0], other) for other in distinct[1:])
            shared.insert(0, tuple(distinct[0][:common].tolist()))
        for ids in shared:
            index, reuse = self._reuse(ids, limit=len(ids))
            if len(ids) - reuse >= MIN_SHARED_TOKENS:
                rows = RowCache(
                    self.model, [(self.entries[index] if index is not None else None, reuse)], len(ids) - reuse, 0
                )
                rows.feed([ids[reuse:]])
                self.entries.append(rows.entry(0, ids))

    def _decode(
        self, rows: RowCache, logits: torch.Tensor, prompts: list[list[int]], params: SamplingConfig, seeds: list[int]
    ) -> tuple[list[Completion], list[CacheEntry]]:
        """Sample up to max_new_tokens per row from `logits` onwards; returns the completions and the
        rows' caches to remember. Finished rows leave the batch (their caches are final: a row's
        last token is never fed), so a few long turns do not keep paying for the attention of every
        row: at once where the batch holds a shared prefix (its buffers hold only the rows' own
        columns, cheap to re-index), else once they are half of it."""
        sample = RowSampler(params, seeds, rows.device)
        eos = self.tokenizer.eos_token_id
        sampled: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finish: list[str | None] = [None] * len(prompts)
        entries: list[CacheEntry | None] = [None] * len(prompts)
        active = list(range(len(prompts)))  # the prompt of each batch row
        for _ in range(params.max_new_tokens):  # type: ignore[arg-type]
            tokens, token_logprobs = sample(logits, active)
            for row, token, logprob in zip(active, tokens.tolist(), token_logprobs.tolist()):
                if finish[row] is not None:
                    continue
                sampled[row].append(token)
                logprobs[row].append(logprob)
                if token == eos or ends_with_stop(self.tokenizer, sampled[row], params.stop):
                    finish[row] = "stop"
                elif len(sampled[row]) == params.max_new_tokens:
                    finish[row] = "length"
            live = [slot for slot, row in enumerate(active) if finish[row] is None]
            if not live:
                break
            if len(live) < len(active) and (rows.shared is not None or 2 * len(live) <= len(active)):
                for slot, row in enumerate(active):
                    if finish[row] is not None:
                        entries[row] = rows.entry(slot, prompts[row] + sampled[row][:-1])
                rows.keep(live)
                active = [active[slot] for slot in live]
            logits = rows.feed([[] if finish[row] else sampled[row][-1:] for row in active])
        for slot, row in enumerate(active):
            entries[row] = rows.entry(slot, prompts[row] + sampled[row][:-1])
        completions = [
            Completion(self.tokenizer.decode(ids, skip_special_tokens=True), ids, lps, reason)  # type: ignore[arg-type]
            for ids, lps, reason in zip(sampled, logprobs, finish)
        ]
        return completions, entries  # type: ignore[return-value]
