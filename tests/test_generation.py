import pytest
import torch

from tracegym.generation import HFBackend, SamplingConfig, render_chat
from tracegym.schema import Message, ToolCall

CONVERSATIONS = [
    [{"role": "user", "content": "Say hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France, and why?"},
    ],
    [{"role": "user", "content": "x"}],
]


def test_render_chat_shows_tool_results_and_calls_to_the_model(tiny):
    _, tokenizer = tiny
    messages = [
        Message(role="user", content="find u1"),
        Message(role="assistant", tool_calls=[ToolCall(name="get_user", arguments={"id": "u1"})]),
        Message(role="tool", content='{"name": "Ann"}', tool_call_id="c"),
    ]
    text = tokenizer.decode(render_chat(tokenizer, messages))
    assert '<tool_call>{"name": "get_user", "arguments": {"id": "u1"}}</tool_call>' in text
    assert '<|im_start|>user\n<tool_response>\n{"name": "Ann"}\n</tool_response><|im_end|>' in text
    assert text.endswith("<|im_start|>assistant\n")


def test_batched_greedy_equals_one_by_one(tiny):
    """Left padding and length sorting must not change what each prompt gets."""
    model, tokenizer = tiny
    params = SamplingConfig(max_new_tokens=6, temperature=0.0)
    batched = HFBackend(model, tokenizer, batch_size=3).chat(CONVERSATIONS, params)
    single = [HFBackend(model, tokenizer, batch_size=1).chat([c], params)[0] for c in CONVERSATIONS]
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]


def test_logprobs_are_the_models_own(tiny):
    model, tokenizer = tiny
    prompt = render_chat(tokenizer, CONVERSATIONS[0])
    completion = HFBackend(model, tokenizer).generate(
        [prompt], SamplingConfig(max_new_tokens=5, temperature=1.0, seed=3)
    )[0]
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].log_softmax(-1)
    expected = logits.gather(-1, torch.tensor(completion.token_ids).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(expected, torch.tensor(completion.logprobs), atol=1e-4)
    assert completion.finish_reason in {"stop", "length"} and len(completion.logprobs) == len(completion.token_ids)


def test_seeded_sampling_is_reproducible(tiny):
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer)
    params = SamplingConfig(max_new_tokens=8, temperature=1.0, seed=11)
    assert [c.token_ids for c in backend.chat(CONVERSATIONS, params)] == [
        c.token_ids for c in backend.chat(CONVERSATIONS, params)
    ]


@pytest.mark.slow
def test_embedded_model_greedy_generation():
    from tracegym.models import load_model

    model, tokenizer = load_model()
    completion = HFBackend(model, tokenizer).chat(
        [[{"role": "user", "content": "What is the capital of France?"}]],
        SamplingConfig(max_new_tokens=24, temperature=0.0),
    )[0]
    assert "Paris" in completion.text
    assert completion.finish_reason == "stop" and completion.token_ids[-1] == tokenizer.eos_token_id
