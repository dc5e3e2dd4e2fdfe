"""Multi-turn GRPO for LoRA adapters, with TRACE turn credit or plain group credit.

A loop of its own (why not a TRL `GRPOTrainer` subclass: docs/engineering.md, "adapters"): rollouts
(tracegym.rollout), advantages (tracegym.adapters.credit), the clipped surrogate, AdamW on the
LoRA weights, gradient clipping, exact-resume checkpoints, and `accelerate` for several processes.

One step: take `groups_per_step` training seeds; roll out `group_size` episodes per seed (the first
round(hint_fraction · group_size) hinted; turn t of rollout r of seed s samples with
sampling_seed(seed, step, s, r, t), independent of what else is in the batch); drop flat groups
(rewards all equal: no advantage) and, up to `max_redraws` extra rounds, roll out as many fresh
training seeds in their place (the log records flat and redrawn groups, and the reward of every
rollout drawn, redrawn ones included); compute per-token
advantages; then up to `mini_batches` AdamW steps on the clipped surrogate, each on whole groups
(group g in step g mod mini_batches: a group's outcome advantages, which sum to zero, are never
split across steps), token-mean over the step's sampled tokens. Each group is trained on its
hint-free prompt encoded once, its continuations attending to it (tracegym.adapters.policy_loss),
also when `micro_batch_size` splits it: the micro-batches' gradients meet at the prompt's keys
and values, and the prompt's encoding is backpropagated once. Micro-batches hold rows of similar
length, each cut after its last sampled token (`GroupBatch.micro_batches`), so one long rollout
does not make every micro-batch run over its length. With `bf16` the update's forward
passes run in bfloat16 autocast (float32 weights, optimizer and log-softmax).

The ratio's denominator. With `mini_batches` = 1 every batch is used once, before any update: the
"old" policy is the current one, so old = new.detach() (ratio exactly 1, clipping inert, gradient
of the plain policy gradient) and no extra forward pass is spent on it. With `mini_batches` > 1
the old log-probs are recomputed before the first update, with the hint-free prompt (the hint
changed the sampling context, so the sampling log-probs are not the right denominator).

Served rollouts (`config.served.url`, `--rollout-url`; default off: in-process generation). The
episodes are sampled by an OpenAI-compatible server (tracegym.served_rollout: every turn a chat
completion whose token ids are recorded exactly, `served.in_flight` requests at once from each
process); the update and its log-probs are computed here as for in-process rollouts. The server
samples from the trainer's LoRA: before a run's first rollouts, and after every step but the last,
the policy's adapter is saved to `<adapter_dir>/<run>-<tag>-step<N>` and loaded through
`/v1/load_lora_adapter` under that name (this run's earlier adapters unloaded and their folders
deleted), so step N+1 samples from the weights after step N, and the first step from the starting
adapter; once the last step is done, this run's adapters are unloaded and their folders deleted.
The log records the adapter each step sampled from (`served_adapter`) and the turns whose prompt
the server tokenised otherwise than the trainer (`context_mismatch_turns`). A server that stops
answering raises `ServerUnavailable` (a UserError naming the URL): the run continues from its last
checkpoint with `--resume` once a server answers again. Held-out evaluation and calibration stay in
process.

Several processes (started by `accelerate launch` or torchrun; a GPU each, or shares of the CPU over
gloo: `on_cpu`). Each process draws every num_processes-th of the step's training seeds and rolls
out, scores and backpropagates only those groups; each optimizer step divides the loss by its
token count over all processes and sums the LoRA gradients across processes in one all-reduce
before clipping, so the step equals one process's on the same groups (tests/test_two_processes.py).
The model is not wrapped in DistributedDataParallel, nor sharded (DeepSpeed and FSDP are refused):
every process holds the whole model to generate. What depends on the number of processes: the
seeds that replace flat groups (each process redraws its own), and with `mini_batches` > 1 which
groups share an optimizer step (each process splits its own groups). Only the main process writes
the log and checkpoints and shows the progress bar.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedType, broadcast, gather_object, parse_flag_from_env
from peft import PeftModel
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from tracegym.adapters.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from tracegym.adapters.config import TurnGRPOConfig
from tracegym.adapters.credit import episode_advantages
from tracegym.adapters.lora import save_policy
from tracegym.adapters.policy_loss import GroupBatch, clipped_surrogate, encode_prompt, group_batches, token_logprobs
from tracegym.adapters.reference_scoring import reference_scores
from tracegym.config import RolloutConfig, ServedRolloutConfig
from tracegym.generation import HFBackend, SamplingConfig, sampling_seed
from tracegym.precision import use_bf16
from tracegym.rollout import Episode, run_episodes
from tracegym.served_rollout import PolicyServer, connect, run_served_episodes
from tracegym.synth_envs.base import Environment

logger = logging.getLogger(__name__)
LOG_FILE = "train_log.jsonl"
CHECKPOINT_DIR = "checkpoint"
# accelerate modes that shard the model itself: this loop generates with the whole model in each process
SHARDED_MODES = (DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.MEGATRON_LM)


def on_cpu() -> bool:
    """Whether the processes compute on the CPU: `accelerate launch --cpu` asked for it
    (ACCELERATE_USE_CPU), or a launcher started several processes (WORLD_SIZE > 1: torchrun,
    `accelerate launch --multi_gpu`) where torch sees no accelerator, which accelerate would
    otherwise leave each on its own, unjoined, instead of joining them over gloo."""
    several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return parse_flag_from_env("ACCELERATE_USE_CPU") or (several and not torch.accelerator.is_available())


def process_state() -> PartialState:
    """This process's place among the launched ones (one process when not launched), on the CPU per
    `on_cpu`. Warns when `accelerate launch --cpu --num_processes N>1` started one process only (it
    starts several on the CPU through MPI alone; torchrun or `accelerate launch --multi_gpu` do)."""
    state = PartialState(cpu=on_cpu())
    if state.num_processes == 1 and "MASTER_PORT" in os.environ and parse_flag_from_env("ACCELERATE_USE_CPU"):
        _warn_one_cpu_process()
    return state


def end_processes() -> None:
    """Let every launched process finish, then take down their process group: gloo's worker threads
    still alive when the interpreter exits abort the process (SIGABRT), now and then. Call after a run
    that succeeded only: one process failing mid-collective would leave the others waiting here."""
    state = process_state()
    if state.num_processes > 1:
        state.wait_for_everyone()
        state.destroy_process_group()


@functools.cache
def _warn_one_cpu_process() -> None:
    logger.warning(
        "one process: `accelerate launch --cpu` starts several only through MPI (--mpirun_hostfile); on the CPU "
        "launch with `accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`"
    )


def varied_groups(episodes: list[Episode], group_size: int) -> list[list[Episode]]:
    """Split seed-major episodes into groups and keep those whose rewards are not all equal."""
    groups = [episodes[i : i + group_size] for i in range(0, len(episodes), group_size)]
    return [g for g in groups if max(e.reward for e in g) - min(e.reward for e in g) > 1e-12]


class TurnGRPOTrainer:
    """Trains the LoRA of `model` (a PeftModel) on episodes of `env_factory` seeds in
    [train_seeds[0], train_seeds[1]), sampled per `rollout`. Writes `train_log.jsonl` and
    `checkpoint/` under `out_dir`. `connection`: what `served_rollout.connect(config.served)`
    returned, when the caller has checked the server already (None: checked here)."""

    def __init__(
        self,
        model: PeftModel,
        tokenizer: PreTrainedTokenizerBase,
        env_factory: Callable[[], Environment],
        config: TurnGRPOConfig,
        rollout: RolloutConfig,
        out_dir: str | Path,
        train_seeds: tuple[int, int] = (0, 10_000),
        accelerator: Accelerator | None = None,
        connection: tuple[PolicyServer, Path] | None = None,
    ) -> None:
        self.config, self.rollout_config, self.tokenizer, self.env_factory = config, rollout, tokenizer, env_factory
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.accelerator = accelerator or Accelerator(cpu=on_cpu())
        if self.accelerator.distributed_type in SHARDED_MODES:
            raise ValueError(
                f"{self.accelerator.distributed_type.value} shards the model; GRPO needs all of it in each process"
            )
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable (LoRA) parameters")
        self.trainable = params
        optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        if config.groups_per_step % self.accelerator.num_processes:
            raise ValueError(
                f"groups_per_step {config.groups_per_step} must divide among {self.accelerator.num_processes} processes"
            )
        # not wrapped in DistributedDataParallel: its hooks all-reduce at every backward pass and its buffers at
        # every forward, while processes here run as many of each as their groups need (_reduce_gradients)
        self.model = model.to(self.accelerator.device)
        self.optimizer = self.accelerator.prepare(optimizer)
        self._sync_trainable()
        self.bf16 = use_bf16(config.bf16, self.accelerator.device.type)
        self.train_lo, span = train_seeds[0], train_seeds[1] - train_seeds[0]
        if span < config.groups_per_step:
            raise ValueError(f"train seed range {train_seeds} is smaller than groups_per_step")
        self.seed_span = span
        self.step, self.cursor = 0, random.Random(config.seed).randrange(span)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.server = self._connect(config.served, connection)
        self.published: str | None = None  # the server's name of the adapter the next rollouts sample from

    @property
    def policy(self) -> PeftModel:
        return self.accelerator.unwrap_model(self.model)

    # -- processes ---------------------------------------------------------------------------

    @torch.no_grad()
    def _sync_trainable(self) -> None:
        """Every process starts from the main process's trainable weights (frozen ones come from the
        same files in every process)."""
        if self.accelerator.num_processes > 1:
            for param in self.trainable:
                broadcast(param.data, from_process=0)

    def _sum(self, values: list[float]) -> list[float]:
        """`values` summed element-wise over the processes (float64; every process passes as many)."""
        acc = self.accelerator
        if acc.num_processes == 1:
            return list(values)
        return acc.reduce(torch.tensor(values, dtype=torch.float64, device=acc.device), reduction="sum").tolist()

    @torch.no_grad()
    def _reduce_gradients(self) -> None:
        """Sum the trainable weights' gradients over the processes, in one all-reduce (a process that
        trained no group adds zeros), so every process steps on the gradient of the whole batch."""
        acc = self.accelerator
        if acc.num_processes == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.trainable]
        total = acc.reduce(torch.cat([g.reshape(-1) for g in grads]), reduction="sum")
        for param, flat in zip(self.trainable, total.split([p.numel() for p in self.trainable])):
            param.grad = flat.view_as(param).to(param.dtype)

    # -- served rollouts ----------------------------------------------------------------------

    def _connect(
        self, served: ServedRolloutConfig, connection: tuple[PolicyServer, Path] | None
    ) -> PolicyServer | None:
        """The rollout server of `served` (None without a URL), checked (`served_rollout.connect`)
        unless `connection` is given; sets the adapter folder and this run's adapter name prefix."""
        if served.url is None:
            return None
        server, self.adapter_dir = connection or connect(served)
        where = self.out_dir.resolve()
        tag = hashlib.blake2b(str(where).encode(), digest_size=3).hexdigest()
        self.adapter_prefix = f"{re.sub(r'[^A-Za-z0-9._-]+', '-', where.name)}-{tag}-step"
        return server

    def _is_mine(self, name: str) -> bool:
        """Whether `name` is one of this run's adapter names (`<run>-<tag>-step<N>`)."""
        step = name[len(self.adapter_prefix) :]
        return name.startswith(self.adapter_prefix) and step.isascii() and step.isdigit()

    def _publish(self) -> str:
        """Save the current LoRA under `adapter_dir` as `<run>-<tag>-step<N>` and load it into the
        server under that name, unloading (and deleting) this run's earlier ones; returns the name.
        A name the server serves already (published before a crash, again after `--resume`) is
        unloaded first: vLLM refuses to load a name it has. The main process talks to the server,
        the others wait."""
        assert self.server is not None
        name = f"{self.adapter_prefix}{self.step}"
        if self.accelerator.is_main_process:
            folder = self.adapter_dir / name
            save_policy(self.policy, folder)
            served = self.server.models()
            if name in served:
                self.server.unload_adapter(name)
            self.server.load_adapter(name, str(folder))
            for old in served:
                if old != name and self._is_mine(old):
                    self.server.unload_adapter(old)
                    shutil.rmtree(self.adapter_dir / old, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.published = name
        return name

    def _withdraw(self) -> None:
        """Unload this run's adapters from the server and delete their folders, once training is
        over (nobody samples from them; several runs sharing a server would fill its --max-loras).
        The main process talks to the server, the others wait."""
        assert self.server is not None
        if self.accelerator.is_main_process:
            for name in self.server.models():
                if self._is_mine(name):
                    self.server.unload_adapter(name)
            for folder in self.adapter_dir.iterdir():
                if self._is_mine(folder.name) and folder.is_dir():
                    shutil.rmtree(folder, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.published = None

    # -- one step ----------------------------------------------------------------------------

    def _draw_seeds(self, groups: int) -> list[int]:
        """The next `groups` training seeds per process from the shared cursor; this process's share
        (every num_processes-th seed), so processes never train on the same seed."""
        acc = self.accelerator
        total = groups * acc.num_processes
        seeds = [self.train_lo + (self.cursor + i) % self.seed_span for i in range(total)]
        self.cursor = (self.cursor + total) % self.seed_span
        return seeds[acc.process_index :: acc.num_processes]

    def _step_seeds(self) -> list[int]:
        """This step's seeds for this process."""
        return self._draw_seeds(self.config.groups_per_step // self.accelerator.num_processes)

    def _varied_rollouts(self, seeds: list[int]) -> tuple[list[Episode], list[Episode], int]:
        """(every episode drawn, the kept episodes, groups redrawn): flat groups of `seeds` replaced
        by groups of fresh seeds, up to `max_redraws` rounds (every process joins each round)."""
        size, acc = self.config.group_size, self.accelerator
        episodes = self.rollouts(seeds)
        kept = [e for group in varied_groups(episodes, size) for e in group]
        redrawn = 0
        for _ in range(self.config.max_redraws):
            missing = len(seeds) - len(kept) // size
            most = int(acc.gather(torch.tensor([missing], device=acc.device)).max())
            if not most:
                break
            fresh = self._draw_seeds(most)[:missing]
            if fresh:
                extra = self.rollouts(fresh)
                episodes += extra
                kept += [e for group in varied_groups(extra, size) for e in group]
                redrawn += len(fresh)
        return episodes, kept, redrawn

    def rollouts(self, seeds: list[int]) -> list[Episode]:
        """Sample `group_size` episodes per seed, in process or from the rollout server (publishing
        the current adapter first if it has not been); this step's sampling seed is
        sampling_seed(config.seed, step), so an episode's draws depend on (seed, step, its seed,
        rollout, turn) only, not on the other groups or the number of processes (a server that
        ignores seeds draws its own)."""
        config = self.config
        params = SamplingConfig(
            max_new_tokens=self.rollout_config.max_new_tokens,
            temperature=self.rollout_config.temperature,
            seed=sampling_seed(config.seed, self.step),
        )
        self.policy.eval()
        if self.server is not None:
            model = self.published if self.published is not None else self._publish()
            served = config.served
            return run_served_episodes(
                self.server,
                self.tokenizer,
                self.env_factory,
                seeds,
                config.group_size,
                params,
                served.in_flight,
                config.hint_fraction,
                model,
            )
        backend = HFBackend(self.policy, self.tokenizer, batch_size=max(len(seeds) * config.group_size, 1))
        return run_episodes(backend, self.env_factory, seeds, config.group_size, params, config.hint_fraction)

    def advantages(self, episodes: list[Episode]) -> torch.Tensor:
        """(B, T) per-completion-token advantages of kept, seed-major episodes (tracegym.adapters.credit)."""
        ell = None
        if self.config.credit.credit == "trace":
            env = self.env_factory()
            gold = {seed: env.gold_answer(seed) for seed in sorted({e.seed for e in episodes})}
            ell = reference_scores(self.policy, self.tokenizer, episodes, gold)
        return episode_advantages(episodes, ell, self.config.credit)

    def _step_groups(self, episodes: list[Episode] | None, advantages: torch.Tensor | None) -> list[list[GroupBatch]]:
        """The groups of each optimizer step: the episodes grouped by training prompt (a GRPO group),
        group g in step g mod S, S = min(mini_batches, most groups on any process). A process with
        fewer groups gets empty steps."""
        groups = group_batches(episodes, advantages, self.pad_id) if episodes else []
        acc = self.accelerator
        most = int(acc.gather(torch.tensor([len(groups)], device=acc.device)).max())
        count = max(1, min(self.config.mini_batches, most))
        return [groups[part::count] for part in range(count)]

    def _autocast(self) -> torch.autocast:
        """The update's forward passes in bfloat16 autocast when `config.bf16` and the device computes
        bfloat16 natively (`tracegym.precision`), else a no-op."""
        return torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    @torch.no_grad()
    def _old_logprobs(self, groups: list[GroupBatch]) -> list[torch.Tensor]:
        """Log-probs of each group's sampled tokens under the policy before this step's updates."""
        device, temperature = self.accelerator.device, self.rollout_config.temperature
        with self._autocast():
            return [token_logprobs(self.model, group.to(device), temperature).cpu() for group in groups]

    def _group_backward(self, group: GroupBatch, old: torch.Tensor | None, tokens: float) -> tuple[float, float]:
        """Backpropagate the group's clipped surrogate divided by `tokens`, `micro_batch_size` rows at
        a time (`GroupBatch.micro_batches`), its prompt encoded once: each micro-batch's backward
        pass stops at the prompt's keys and values (leaves that sum their gradients), which then go
        back through the prompt's encoding once. `old`: the group's old log-probs (None: this
        policy's, detached). Returns the loss and the number of tokens where the clip binds."""
        config, acc = self.config, self.accelerator
        with self._autocast():
            encoded = encode_prompt(self.model, group.prompt_ids)
        leaves = [(keys.detach().requires_grad_(), values.detach().requires_grad_()) for keys, values in encoded]
        loss, clipped = 0.0, 0.0
        for rows, micro in group.micro_batches(config.micro_batch_size):
            with self._autocast():
                logprobs = token_logprobs(self.model, micro, self.rollout_config.temperature, leaves)
            loss_sum, n_clipped = clipped_surrogate(
                logprobs,
                logprobs.detach() if old is None else old[rows, : logprobs.shape[1]],
                micro.advantages,
                micro.loss_mask,
                config.epsilon_low,
                config.epsilon_high,
            )
            acc.backward(loss_sum / tokens)
            loss += loss_sum.item() / tokens
            clipped += n_clipped.item()
        # every continuation attends to every prompt position in every layer, so every leaf has a gradient
        torch.autograd.backward(
            [tensor for pair in encoded for tensor in pair], [leaf.grad for pair in leaves for leaf in pair]
        )
        return loss, clipped

    def update(self, episodes: list[Episode] | None, advantages: torch.Tensor | None = None) -> dict[str, float]:
        """AdamW steps on the clipped surrogate over `episodes` with their (B, T) per-token
        `advantages`, whole groups per step (_step_groups). Each step's loss is the token mean over
        every process's groups: each process backpropagates its groups' surrogate divided by the
        step's token count over all processes, and the gradients are summed across processes
        (`_reduce_gradients`; a process without episodes adds zeros). Returns the loss (mean over the
        steps), the clip fraction and the trained tokens, all over every process."""
        config, acc = self.config, self.accelerator
        parts = self._step_groups(episodes, advantages)
        self.model.train()
        olds = [self._old_logprobs(part) for part in parts] if len(parts) > 1 else None
        local_tokens = [float(sum(group.loss_mask.sum() for group in part)) for part in parts]
        step_tokens = [max(tokens, 1.0) for tokens in self._sum(local_tokens)]
        losses, clipped = [], 0.0
        for index, part in enumerate(parts):
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for number, group in enumerate(part):
                old = olds[index][number].to(acc.device) if olds else None
                group_loss, group_clipped = self._group_backward(group.to(acc.device), old, step_tokens[index])
                total += group_loss
                clipped += group_clipped
            losses.append(total)
            self._reduce_gradients()
            acc.clip_grad_norm_(self.trainable, config.max_grad_norm)
            self.optimizer.step()
        self.model.eval()
        *losses, clipped, tokens_seen = self._sum([*losses, clipped, sum(local_tokens)])
        return {
            "loss": float(np.mean(losses)) if tokens_seen else None,
            "clip_fraction": clipped / tokens_seen if tokens_seen else 0.0,
            "train_tokens": tokens_seen,
            "optimizer_steps": len(parts),
        }

    def _reward_stats(self, episodes: list[Episode]) -> tuple[float, float, float | None]:
        """(mean, population std, mean over unhinted episodes; None without any) of the rewards of
        every process's `episodes` (processes may hold different numbers after redraws)."""
        acc, rewards = self.accelerator, [e.reward for e in episodes]
        unhinted = [e.reward for e in episodes if not e.hinted]
        sums = [len(rewards), sum(rewards), sum(r * r for r in rewards), len(unhinted), sum(unhinted)]
        n, total, squares, n_unhinted, unhinted_total = (
            acc.gather(torch.tensor([sums], dtype=torch.float64, device=acc.device)).reshape(-1, 5).sum(0).tolist()
        )
        mean = total / n
        return mean, math.sqrt(max(squares / n - mean * mean, 0.0)), unhinted_total / n_unhinted if n_unhinted else None

    def train_step(self) -> dict[str, Any]:
        """One GRPO step; returns its log record (wall times in seconds: the whole step, its rollouts
        with redraws, and the rest: reference scoring and the update)."""
        started = time.perf_counter()
        acc = self.accelerator
        seeds = self._step_seeds()
        episodes, kept, redrawn = self._varied_rollouts(seeds)
        rolled_out = time.perf_counter()
        groups = (
            acc.gather(
                torch.tensor([len(kept) // self.config.group_size, redrawn, len(seeds) + redrawn], device=acc.device)
            )
            .reshape(-1, 3)
            .sum(0)
        )
        reward_mean, reward_std, unhinted_mean = self._reward_stats(episodes)
        kept_groups, redrawn_groups, drawn_groups = (int(n) for n in groups)
        record: dict[str, Any] = {
            "step": self.step + 1,
            "reward_mean": reward_mean,
            "reward_std": reward_std,
            "reward_unhinted_mean": unhinted_mean,
            "groups": self.config.groups_per_step,
            "kept_groups": kept_groups,
            "redrawn_groups": redrawn_groups,
            "flat_groups": drawn_groups - kept_groups,
            "rollouts": drawn_groups * self.config.group_size,
            "seeds": sorted(set(gather_object(sorted({e.seed for e in episodes})))),
            "loss": None,
            "clip_fraction": 0.0,
            "train_tokens": 0.0,
        }
        if self.server is not None:
            record["served_adapter"] = self.published
            mismatches = sum(e.info.get("context_mismatch_turns", 0) for e in episodes)
            record["context_mismatch_turns"] = int(self._sum([float(mismatches)])[0])
        if kept_groups:
            record.update(self.update(kept, self.advantages(kept) if kept else None))
        else:
            record["optimizer_steps"] = 0
        self.step += 1
        if self.server is not None and self.step < self.config.steps:  # the last step's weights sample nothing
            self._publish()
        finished = time.perf_counter()
        record.update(
            step_seconds=finished - started, rollout_seconds=rolled_out - started, update_seconds=finished - rolled_out
        )
        return record

    # -- the loop, checkpoints, resume ------------------------------------------------------

    def _checkpoint(self) -> None:
        if self.accelerator.is_main_process:
            save_checkpoint(
                self.out_dir / CHECKPOINT_DIR, self.policy, self.optimizer, {"step": self.step, "cursor": self.cursor}
            )
        self.accelerator.wait_for_everyone()

    def resume(self) -> bool:
        """Restore the latest checkpoint under `out_dir` (True if one was found) and cut the log
        back to its step (to nothing without one), so a killed run continues exactly where the
        checkpoint left it and its log holds only the steps it keeps."""
        found = find_checkpoint(self.out_dir / CHECKPOINT_DIR)
        if found is not None:
            state = load_checkpoint(found, self.policy, self.optimizer)
            self.step, self.cursor = state["step"], state["cursor"]
            logger.info("resumed from %s at step %d", found, self.step)
        log = self.out_dir / LOG_FILE
        if log.is_file() and self.accelerator.is_main_process:
            lines = [line for line in log.read_text().splitlines() if line and json.loads(line)["step"] <= self.step]
            log.write_text("".join(line + "\n" for line in lines))
        return found is not None

    def train(self, progress: bool = True, until: int | None = None) -> list[dict[str, Any]]:
        """Run steps until step `until` (default `config.steps`); returns this call's log records.
        Checkpoints fall on multiples of `save_every` and on the last step, not on `until`. With
        served rollouts, reaching the last step unloads this run's adapters from the server."""
        config, records = self.config, []
        until = config.steps if until is None else min(until, config.steps)
        bar = tqdm(
            total=config.steps,
            initial=self.step,
            desc="grpo",
            unit="step",
            disable=not progress or not self.accelerator.is_main_process,
        )
        while self.step < until:
            record = self.train_step()
            records.append(record)
            if self.accelerator.is_main_process:
                with (self.out_dir / LOG_FILE).open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record) + "\n")
            bar.update(1)
            bar.set_postfix(
                reward=f"{record['reward_mean']:.3f}",
                kept=record["kept_groups"],
                step_s=f"{record['step_seconds']:.1f}",
            )
            if self.step % config.save_every == 0 or self.step == config.steps:
                self._checkpoint()
        bar.close()
        if self.server is not None and self.step >= config.steps:
            self._withdraw()
        return records


def read_log(out_dir: str | Path) -> list[dict[str, Any]]:
    """The records of `train_log.jsonl` under `out_dir`."""
    path = Path(out_dir) / LOG_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []
