"""Router training, the task router, the routed folder and `load_policy` (tiny model)."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
from moe_fixtures import FAMILIES
from peft import PeftModel

from tracegym.cli import main
from tracegym.errors import UserError
from tracegym.generation import HFBackend, SamplingConfig, render_chat
from tracegym.models import tiny_model
from tracegym.moe_router.config import RouterTrainingConfig
from tracegym.moe_router.folder import (
    GATES_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    load_mixture,
    load_policy,
    read_manifest,
    task_router_for,
)
from tracegym.moe_router.router_training import load_balance_loss, train_gates
from tracegym.moe_router.task_router import UserTurnReader, enable_task_routing, label_token_ids, task_prompt
from tracegym.schema import Message

pytest_plugins = ("moe_fixtures",)  # the fixtures tiny_adapters and routed_folder


def test_gates_learn_separable_labels_and_the_balance_term_spreads_the_load():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (600,), generator=generator)
    centres = torch.randn(3, 8, generator=generator) * 3
    features = (centres[labels] + torch.randn(600, 8, generator=generator)).expand(2, -1, -1)
    weight, bias, log = train_gates(features, labels, 3, RouterTrainingConfig(steps=150, learning_rate=0.05))
    assert log["train_accuracy"] > 0.95 and weight.shape == (2, 3, 8) and bias.shape == (2, 3)
    # uniform load scores 1; all tokens on one slot scores num_slots
    assert load_balance_loss(torch.zeros(1, 4, 3).index_fill_(-1, torch.tensor([0]), 50.0)) == pytest.approx(
        3.0, abs=1e-4
    )
    assert load_balance_loss(50 * torch.eye(3).repeat(1, 4, 1)) == pytest.approx(1.0, abs=1e-4)
    skewed = torch.cat([torch.zeros(500, dtype=torch.long), labels[:100]])
    shares = []
    for balance in (0.0, 20.0):
        config = RouterTrainingConfig(steps=150, learning_rate=0.05, load_balance=balance)
        weight, bias, _ = train_gates(features[:, : len(skewed)], skewed, 3, config)
        logits = features[0, : len(skewed)] @ weight[0].T + bias[0]
        shares.append((logits.argmax(-1) == 0).float().mean().item())
    assert shares[1] < shares[0] - 0.05  # a strong balance term moves tokens off the majority slot


def test_route_writes_a_folder_with_hashes_gates_and_heldout_accuracy(routed_folder):
    for name in (MANIFEST_FILE, GATES_FILE, METRICS_FILE):
        assert (routed_folder / name).is_file()
    manifest = read_manifest(routed_folder)
    assert [a.name for a in manifest.adapters] == list(FAMILIES) and manifest.base_model == "tiny"
    for entry in manifest.adapters:
        assert set(entry.sha256) == {"adapter_config.json", "adapter_model.safetensors", "artifact.json"}
        assert (routed_folder / entry.folder / "adapter_model.safetensors").is_file()
    metrics = json.loads((routed_folder / METRICS_FILE).read_text())
    heldout = metrics["token_router"]["heldout"]
    assert set(heldout["per_slot"]) == {"base", *FAMILIES} and len(heldout["per_layer"]) == 2
    assert 0.0 <= heldout["balanced_accuracy"] <= 1.0
    assert heldout["heldout_family"]["family"] not in FAMILIES
    assert (
        metrics["task_router"]["tasks"] > 0
        and sum(metrics["task_router"]["chosen"].values()) == metrics["task_router"]["tasks"]
    )
    model, _, router, _ = load_mixture(routed_folder)
    assert router.gate_weight.abs().sum() > 0  # trained gates came back


@torch.no_grad()
def test_load_policy_routes_base_single_adapter_and_gates_and_hfbackend_drives_it(routed_folder):
    ids = torch.randint(5, 2000, (2, 12), generator=torch.Generator().manual_seed(0))
    base, tokenizer = tiny_model()
    model, _ = load_policy(routed_folder, "base")
    assert torch.equal(model(ids).logits, base(ids).logits)
    name = FAMILIES[1]
    model, _ = load_policy(routed_folder, name)
    peft = PeftModel.from_pretrained(copy.deepcopy(base), str(routed_folder / "adapters" / name)).eval()
    assert (model(ids).logits - peft(ids).logits).abs().max() <= 1e-5
    model, tokenizer = load_policy(routed_folder)
    conversations = [[Message(role="user", content="Book a room for two.")], [Message(role="user", content="Hi")]]
    completions = HFBackend(model, tokenizer).chat(conversations, SamplingConfig(max_new_tokens=5, temperature=0.0))
    assert len(completions) == 2 and all(c.token_ids for c in completions)
    with pytest.raises(UserError, match="no adapter 'nope'"):
        load_policy(routed_folder, "nope")


def test_a_tampered_or_incomplete_folder_is_refused(routed_folder, tmp_path):
    broken = tmp_path / "copy"
    shutil.copytree(routed_folder, broken)
    weights = broken / "adapters" / FAMILIES[0] / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(UserError, match="content differs from the sha256"):
        read_manifest(broken)
    manifest = json.loads((routed_folder / MANIFEST_FILE).read_text())
    manifest["adapters"][0]["sha256"].pop("adapter_model.safetensors")
    (broken / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="must record the sha256 of"):
        read_manifest(broken)
    manifest["adapters"][0]["folder"] = "../../elsewhere"
    manifest["adapters"][0]["sha256"]["adapter_model.safetensors"] = "0" * 64
    (broken / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="is missing"):
        read_manifest(broken)
    (broken / MANIFEST_FILE).write_text(json.dumps({**manifest, "top_k": 9}))
    with pytest.raises(UserError, match="top_k"):
        read_manifest(broken)
    (broken / MANIFEST_FILE).write_text('{"format": "tracegym-router/1"}')
    with pytest.raises(UserError, match="router.json: not a router manifest: base_model"):
        read_manifest(broken)
    with pytest.raises(UserError, match="router.json: cannot read"):
        read_manifest(tmp_path)


def test_user_turn_reader_finds_the_task_in_template_tokens():
    _, tokenizer = tiny_model()
    reader = UserTurnReader(tokenizer)
    task = "Move order #12 to Friday.\nThen confirm."
    ids = render_chat(
        tokenizer,
        [
            Message(role="system", content="You are an agent."),
            Message(role="user", content=task),
            Message(role="assistant", content="ok"),
            Message(role="user", content="later turn"),
        ],
    )
    assert reader.first_user_message(ids) == task
    assert (
        reader.first_user_message(render_chat(tokenizer, [Message(role="system", content="only a system turn")]))
        is None
    )
    assert len(label_token_ids(tokenizer, 5)) == 5
    assert "E: none of these" in task_prompt([(f"cap{i}", "d") for i in range(4)], task)[1].content


@torch.no_grad()
def test_task_routing_routes_each_conversation_to_the_task_routers_choice(routed_folder):
    model, tokenizer, router, manifest = load_mixture(routed_folder)
    task_router = task_router_for(model, tokenizer, router, manifest)
    tasks = ["Book the small room on Monday for Ana and Bo.", "Cancel order #7 if the policy allows it."]
    chosen = task_router.choose(tasks)
    for task, slot in zip(tasks, chosen):  # the choice is the arg-max label token of the base model
        ids = render_chat(tokenizer, task_prompt(task_router.capabilities, task))
        with router.forcing(0):
            logits = model(torch.tensor([ids])).logits[0, -1, task_router.labels]
        label = int(logits.argmax())
        assert slot == (0 if label == len(FAMILIES) else label + 1)
    prompts = [
        render_chat(tokenizer, [Message(role="system", content="s"), Message(role="user", content=t)]) for t in tasks
    ]
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    expected = []
    for row, slot in enumerate(chosen):
        with router.routing_rows([slot, slot]):
            expected.append(model(input_ids=ids, attention_mask=mask).logits[row])
    enable_task_routing(model, tokenizer, task_router)
    routed = model(input_ids=ids, attention_mask=mask).logits
    assert router.row_slots.tolist() == chosen
    for row in range(len(chosen)):
        assert (routed[row] - expected[row]).abs().max() <= 1e-5


def test_route_command_reports_bad_inputs_in_one_line(tiny_adapters, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (bare / name).write_bytes((tiny_adapters[0] / name).read_bytes())
    assert main(["route", str(bare), "--out", str(tmp_path / "out")]) == 1
    assert "bare/artifact.json: cannot read" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    assert main(["route", str(tiny_adapters[0]), "--out", str(taken)]) == 1
    assert "taken: exists and is not empty (pass --overwrite" in capsys.readouterr().err
    assert main(["route", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 1
    assert "missing: no such adapter folder" in capsys.readouterr().err
    args = [
        "route",
        str(tiny_adapters[0]),
        "--out",
        str(tmp_path / "cut"),
        "--router-max-tokens",
        "64",
        "--router-train-dialogues",
        "1",
        "--router-heldout-dialogues",
        "1",
        "--router-labels",
        "assistant",
    ]
    assert main(args) == 1
    assert "no training tokens for tool_calling_precision" in capsys.readouterr().err


def test_router_data_labels_whole_dialogues_or_assistant_turns():
    from tracegym.moe_router.router_data import oracle_dialogues, router_data
    from tracegym.schema import EnvSpec
    from tracegym.synth_envs.registry import families, make_env

    _, tokenizer = tiny_model()
    spec = EnvSpec(capability=FAMILIES[0], family=FAMILIES[0])
    whole = oracle_dialogues(tokenizer, spec, 2, [5], 10_000)[0]
    assert set(whole.labels) == {2} and whole.task == make_env(FAMILIES[0]).reset(5)
    turns = oracle_dialogues(tokenizer, spec, 2, [5], 10_000, assistant_only=True)[0]
    assert turns.input_ids == whole.input_ids and set(turns.labels) == {0, 2}
    labelled = tokenizer.decode([t for t, label in zip(turns.input_ids, turns.labels) if label == 2])
    assert labelled == "".join(turn + "<|im_end|>" for turn in make_env(FAMILIES[0]).oracle(5))
    data = router_data(tokenizer, [spec], 2, 1, 256)
    uncovered = [f for f in families() if f != FAMILIES[0]]
    assert data.heldout_family == uncovered[-1] and data.base_families == uncovered[:-1]
    assert {d.family for d in data.train} == {FAMILIES[0], *uncovered[:-1]} and all(
        len(d.input_ids) <= 256 for d in data.train
    )
    assert {d.slot for d in data.heldout if d.family == data.heldout_family} == {0}


def test_the_agents_own_domain_is_base_text_in_training_and_held_out():
    from tracegym.eval.config import RunConfig
    from tracegym.eval.pipeline import target_domain
    from tracegym.eval.target import TargetConfig
    from tracegym.moe_router.router_data import router_data
    from tracegym.schema import EnvSpec

    _, tokenizer = tiny_model()
    config = RunConfig(target=TargetConfig(train_tasks=3))
    domain = target_domain(config)
    # the first router.train_dialogues train tasks to train on, the held-out ones after them, within the split
    assert list(domain.train_seeds) == [0, 1, 2] and list(domain.heldout_seeds) == []
    domain = target_domain(RunConfig())
    trained, held = config.router.train_dialogues, config.router.heldout_dialogues
    assert list(domain.train_seeds) == list(range(trained))
    assert list(domain.heldout_seeds) == list(range(trained, trained + held))
    spec = EnvSpec(capability=FAMILIES[0], family=FAMILIES[0])
    data = router_data(tokenizer, [spec], 2, 1, 128, domain=domain)
    assert data.domain == "hotel_desk"
    for split, seeds in ((data.train, domain.train_seeds), (data.heldout, domain.heldout_seeds)):
        own = [d for d in split if d.family == "hotel_desk"]
        assert [d.seed for d in own] == list(seeds) and {label for d in own for label in d.labels} == {0}
        assert [d.task for d in own] == [domain.env.reset(seed) for seed in seeds]
    assert router_data(tokenizer, [spec], 2, 1, 128).domain is None


def test_router_base_text_leaves_out_a_family_that_needs_a_sandbox_this_machine_lacks(monkeypatch, caplog):
    from tracegym.moe_router.router_data import router_data
    from tracegym.schema import EnvSpec
    from tracegym.synth_envs import sandbox

    monkeypatch.setenv(sandbox.SWITCH, "off")
    _, tokenizer = tiny_model()
    spec = EnvSpec(capability=FAMILIES[0], family=FAMILIES[0])
    data = router_data(tokenizer, [spec], 2, 1, 64)
    assert "code_repair" not in {d.family for d in data.train + data.heldout}
    assert "code_repair" not in (*data.base_families, data.heldout_family) and data.base_families
    assert "router base text leaves out code_repair: the sandbox is switched off" in caplog.text
