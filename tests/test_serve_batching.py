"""Continuous batching in `tracegym serve` (the tiny test model, its weights scaled up so that each
greedy token depends on the context): requests that join the running rows at different times,
with different prompts, slots, sampling settings and max_tokens, reply as each does alone; a
request that arrives while a long one decodes ends first; the running rows are bounded; over HTTP,
concurrent streamed replies and their log-probabilities equal the replies served alone."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import torch
from moe_fixtures import RecordingSink

from tracegym.generation import render_chat
from tracegym.models import tiny_model
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.engine import GATED, Engine, GenerationRequest
from tracegym.moe_router.lora_slots import LoraSlots
from tracegym.moe_router.server import RunningServer, create_app

TEXTS = ["Hello there.", "Book a room for two nights, please.", "Cancel booking 42.", "What time is check-out?"]


def _sharpen(model: torch.nn.Module) -> None:
    """Scale every weight but the norms: the random model's greedy tokens then vary with context."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(8)


@pytest.fixture(scope="module")
def setup():
    """(model, tokenizer, slots): the sharpened tiny model with two random LoRA slots and random gates."""
    model, tokenizer = tiny_model()
    _sharpen(model)
    slots = LoraSlots(model, 2, 4)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in slots.layers.values():
            layer.lora_A_T.copy_(torch.randn(layer.lora_A_T.shape, generator=generator) * 0.5)
            layer.lora_B_T.copy_(torch.randn(layer.lora_B_T.shape, generator=generator) * 0.5)
        for weight in slots.router.gate_weight:
            weight.copy_(torch.randn(weight.shape, generator=generator))
    return model, tokenizer, slots


@pytest.fixture
def engine(setup) -> Iterator[Engine]:
    model, tokenizer, slots = setup
    running = Engine(model, tokenizer, slots.router, lambda task: 1, max_batch_size=8, batch_wait_s=0.0)
    running.start()
    yield running
    running.stop()


def _prompt(tokenizer, text: str) -> list[int]:
    return render_chat(tokenizer, [{"role": "user", "content": text}])


def _request(
    tokenizer, sink: RecordingSink, text: str, slot: int | None, max_tokens: int, **extra
) -> GenerationRequest:
    return GenerationRequest(
        _prompt(tokenizer, text), max_tokens, extra.pop("temperature", 0.0), 1.0, sink, slot, **extra
    )


# (text, slot, max_tokens, logprobs): base, both LoRA slots, the gates, the task router (slot 1)
CASES = [(0, 0, 24, 3), (1, 1, 9, None), (2, 2, 17, 0), (3, GATED, 13, 2), (1, None, 6, None), (2, 0, 30, None)]


def _alone(engine: Engine, tokenizer) -> list[RecordingSink]:
    sinks = []
    for text, slot, max_tokens, logprobs in CASES:
        sink = RecordingSink()
        engine.submit(_request(tokenizer, sink, TEXTS[text], slot, max_tokens, logprobs=logprobs))
        assert sink.done.wait(60)
        sinks.append(sink)
    return sinks


def test_greedy_replies_joining_at_different_times_equal_each_served_alone(setup, engine):
    model, tokenizer, slots = setup
    alone = _alone(engine, tokenizer)
    assert all(sink.finish == "length" for sink in alone)
    assert len({tuple(sink.tokens) for sink in alone}) == len(alone)  # the cases reply differently
    assert len(set(alone[0].tokens)) > 5  # and the tokens vary within a reply
    # the base slot alone is the argmax of the whole context's logits at every step (no cache)
    ids = _prompt(tokenizer, TEXTS[0])
    with torch.inference_mode(), slots.router.routing_rows([0]):
        for _ in range(24):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert alone[0].tokens == ids[-24:]

    together = [RecordingSink(engine) for _ in CASES]
    sampled = RecordingSink(engine)  # a sampling neighbour, not compared

    def submit(index: int) -> None:
        text, slot, max_tokens, logprobs = CASES[index]
        engine.submit(_request(tokenizer, together[index], TEXTS[text], slot, max_tokens, logprobs=logprobs))

    # each request arrives once the previous one has sampled 3 tokens: it joins a running batch
    for index in range(len(CASES) - 1):
        together[index].on_token = lambda sink, nxt=index + 1: len(sink.tokens) == 3 and submit(nxt)
    engine.submit(_request(tokenizer, sampled, TEXTS[3], 2, 20, temperature=1.0))
    submit(0)
    assert all(sink.done.wait(60) for sink in together) and sampled.done.wait(60)
    assert max(max(sink.running) for sink in together) >= 3  # rows really ran together
    for case, first, second in zip(CASES, alone, together):
        assert second.finish == "length", case
        assert second.tokens == first.tokens, case
        if case[3] is not None:
            for a, b in zip(first.logprobs, second.logprobs):
                assert b.logprob == pytest.approx(a.logprob, abs=1e-4)
                assert [t for t, _ in b.top] == [t for t, _ in a.top] and len(b.top) == case[3]
    assert len(sampled.tokens) == 20 and sampled.finish == "length"


def test_a_request_arriving_while_a_long_one_decodes_ends_before_it(setup, engine):
    _, tokenizer, _ = setup
    long, short = RecordingSink(), RecordingSink()
    seen_at_short_end: list[int] = []
    short.end = lambda reason: (seen_at_short_end.append(len(long.tokens)), RecordingSink.end(short, reason))
    long.on_token = lambda sink: len(sink.tokens) == 5 and engine.submit(_request(tokenizer, short, TEXTS[1], 0, 4))
    engine.submit(_request(tokenizer, long, TEXTS[0], 0, 200))
    assert short.done.wait(60) and long.done.wait(120)
    assert short.finish == "length" and len(short.tokens) == 4
    assert long.finish == "length" and len(long.tokens) == 200
    assert seen_at_short_end and seen_at_short_end[0] < 20  # joined and left while the long one ran


def test_running_rows_are_bounded_and_the_rest_wait(setup):
    model, tokenizer, slots = setup
    engine = Engine(model, tokenizer, slots.router, lambda task: 1, max_batch_size=2, batch_wait_s=0.0)
    engine.start()
    try:
        sinks = [RecordingSink(engine) for _ in range(5)]
        for index, sink in enumerate(sinks):
            engine.submit(_request(tokenizer, sink, TEXTS[index % 4], index % 3, 5 + index))
        assert all(sink.done.wait(60) for sink in sinks)
    finally:
        engine.stop()
    assert [len(sink.tokens) for sink in sinks] == [5 + index for index in range(5)]
    assert max(max(sink.running) for sink in sinks) == 2


def test_stop_strings_and_cancelled_rows_leave_without_disturbing_the_others(setup, engine):
    _, tokenizer, _ = setup
    plain = RecordingSink()
    engine.submit(_request(tokenizer, plain, TEXTS[2], 1, 12))
    assert plain.done.wait(60)
    stop = tokenizer.decode(plain.tokens[3:5])
    stopped, cancelled, neighbour = RecordingSink(), RecordingSink(), RecordingSink()
    cancel = _request(tokenizer, cancelled, TEXTS[0], 0, 100)
    cancelled.on_token = lambda sink: len(sink.tokens) == 4 and cancel.cancelled.set()
    engine.submit(cancel)
    engine.submit(_request(tokenizer, stopped, TEXTS[2], 1, 12, stops=(stop,)))
    engine.submit(_request(tokenizer, neighbour, TEXTS[2], 1, 12))
    assert stopped.done.wait(60) and neighbour.done.wait(60)
    assert stopped.finish == "stop" and stop in tokenizer.decode(stopped.tokens) and len(stopped.tokens) <= 5
    assert neighbour.tokens == plain.tokens
    assert cancelled.finish is None and len(cancelled.tokens) == 4  # a cancelled row leaves silently


def _chat(url: str, text: str, max_tokens: int, stream: bool) -> tuple[str, list[tuple[str, float]]]:
    """A greedy reply with logprobs: its text and (token, log-probability) pairs."""
    body = {
        "model": "base",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
        "stream": stream,
    }
    if not stream:
        choice = httpx.post(url, json=body, timeout=60).json()["choices"][0]
        return choice["message"]["content"], [(e["token"], e["logprob"]) for e in choice["logprobs"]["content"]]
    text, entries = "", []
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[6:])["choices"][0]
            text += choice["delta"].get("content") or ""
            entries += [(e["token"], e["logprob"]) for e in (choice.get("logprobs") or {}).get("content", [])]
    return text, entries


def test_concurrent_streamed_replies_and_logprobs_over_http_equal_each_alone():
    app, engine = create_app("tiny", ServeConfig(model_name="base", max_batch_size=4))
    _sharpen(engine.model)
    jobs = [(TEXTS[index % 4], 6 + 3 * index, index % 2 == 0) for index in range(6)]
    with RunningServer(app) as running:
        url = f"{running.url}/v1/chat/completions"
        alone = [_chat(url, text, max_tokens, False) for text, max_tokens, _ in jobs]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            together = list(pool.map(lambda job: _chat(url, *job), jobs))
    assert engine.forward_rows > engine.forward_passes
    for (text, entries), (text_together, entries_together) in zip(alone, together):
        assert text_together == text
        assert [t for t, _ in entries_together] == [t for t, _ in entries]
        assert [lp for _, lp in entries_together] == pytest.approx([lp for _, lp in entries], abs=1e-4)


def test_exclusive_waits_for_the_running_rows_and_holds_back_new_ones(setup, engine):
    """Adapter weights change only between requests: `exclusive()` enters once the running row is
    done, and a request queued meanwhile starts only after it."""
    _, tokenizer, _ = setup
    running, queued = RecordingSink(), RecordingSink()
    entered, release, seen = threading.Event(), threading.Event(), {}

    def hold() -> None:
        with engine.exclusive():
            seen["running_done"], seen["queued_tokens"] = running.done.is_set(), len(queued.tokens)
            entered.set()
            release.wait(30)

    holder = threading.Thread(target=hold)

    def on_token(sink: RecordingSink) -> None:
        if len(sink.tokens) == 2:
            holder.start()
            while not engine._turnstile.locked():  # the holder waits for the model: `exclusive()` is pending
                time.sleep(0.001)
            engine.submit(_request(tokenizer, queued, TEXTS[1], 0, 3))

    running.on_token = on_token
    engine.submit(_request(tokenizer, running, TEXTS[0], 0, 40))
    assert entered.wait(60)
    assert seen == {"running_done": True, "queued_tokens": 0} and len(running.tokens) == 40
    assert not queued.done.wait(0.3) and not queued.tokens  # held back while the block runs
    release.set()
    holder.join(30)
    assert queued.done.wait(60) and queued.finish == "length"


def test_a_request_the_task_router_fails_on_fails_alone_and_the_engine_keeps_serving(setup):
    model, tokenizer, slots = setup

    def choose_slot(task: str) -> int:
        if task == "too long":
            raise RuntimeError("position ids past the model's context")
        return 1

    engine = Engine(model, tokenizer, slots.router, choose_slot, max_batch_size=8, batch_wait_s=0.05)
    failing, served, later = RecordingSink(), RecordingSink(), RecordingSink()
    engine.start()
    try:
        engine.submit(_request(tokenizer, failing, "a", None, 5, task="too long"))
        engine.submit(_request(tokenizer, served, "b", None, 5, task="fine"))
        assert failing.done.wait(60) and served.done.wait(60)
        engine.submit(_request(tokenizer, later, "c", None, 5, task="fine"))
        assert later.done.wait(60)
    finally:
        engine.stop()
    assert failing.finish == "error: routing failed: RuntimeError: position ids past the model's context"
    assert served.finish == later.finish == "length" and len(served.tokens) == 5


def test_a_seeded_sampled_reply_repeats_alone_and_beside_other_rows(setup, engine):
    _, tokenizer, _ = setup

    def sampled(seed: int, beside: bool = False) -> list[int]:
        sink, other = RecordingSink(), RecordingSink()
        if beside:  # a longer row already running, with its own sampling
            engine.submit(_request(tokenizer, other, "another prompt", 2, 40, temperature=1.0))
        engine.submit(_request(tokenizer, sink, "same prompt", 1, 20, temperature=1.0, seed=seed))
        assert sink.done.wait(60) and (not beside or other.done.wait(60))
        return sink.tokens

    first = sampled(7)
    assert sampled(7) == first and sampled(7, beside=True) == first
    assert sampled(8) != first
