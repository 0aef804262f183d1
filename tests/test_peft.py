"""mdiff.integrations.peft against the real PEFT: adapters made by ``peft`` on tiny ``transformers`` models
(built from configs, no downloads) become updates whose application to the base matches
PEFT's own ``merge_and_unload()`` — within SPEC.md §7.5's tolerance for the LoRA factors,
bit for bit for everything else — and the adapters mdiff cannot express are refused."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import open_checkpoint, save_checkpoint
from mdiff.errors import ApplyError, CheckpointError
from mdiff.format.dtypes import as_bits, dtype_of
from mdiff.integrations.peft import lora_updates, lora_updates_from_checkpoint
from mdiff.updates.low_rank import within_tolerance

torch = pytest.importorskip("torch", reason="the PEFT tests need torch (pip install -e '.[test]')")
peft = pytest.importorskip("peft", reason="the PEFT tests need peft (pip install -e '.[test]')")
transformers = pytest.importorskip("transformers", reason="the PEFT tests need transformers (pip install -e '.[test]')")

from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

HIDDEN = 32


def _numpy(tensor) -> np.ndarray:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: go through the bit patterns
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return tensor.numpy().copy()


def _state(model) -> dict[str, np.ndarray]:
    return {k: _numpy(v) for k, v in model.state_dict().items()}


def _bert(cls=None):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=16, type_vocab_size=2,
    )
    return (cls or transformers.BertModel)(config).eval()


def _make(tmp: Path, factory, lora_config, *, seed=1, base_of=None, safe=True):
    """Base checkpoint, saved adapter (trainable tensors set to non-zero random values) and PEFT's merge of
    the adapter as saved: loaded onto a fresh copy of the base with ``PeftModel.from_pretrained``, merged
    with ``merge_and_unload``. (Not the in-memory model's merge: PEFT saves the config with sorted keys,
    so where rank_pattern/alpha_pattern keys overlap, the model that saved an adapter and the one that
    loads it can disagree; the file is what mdiff reads.)"""
    model = factory()
    full = _state(model)
    base = full if base_of is None else base_of(full)
    base_path = tmp / "base.safetensors"
    save_checkpoint(base_path, base)
    wrapped = get_peft_model(model, lora_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in wrapped.named_parameters():
            if parameter.requires_grad:  # LoRA factors (lora_B starts at zero), modules_to_save, trained biases
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    adapter = tmp / "adapter"
    wrapped.save_pretrained(adapter, safe_serialization=safe)
    if not safe:
        return base_path, adapter, base, None
    fresh = factory()
    assert all(np.array_equal(v, full[k]) for k, v in _state(fresh).items())
    merged = _state(PeftModel.from_pretrained(fresh, adapter).merge_and_unload())
    return base_path, adapter, base, merged


class _TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.conv2 = torch.nn.Conv2d(8, 6, 1)
        self.head = torch.nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.conv2(self.conv1(x)).mean((2, 3)))


def _tiny_conv():
    torch.manual_seed(0)
    return _TinyConv().eval()


def _check(base, merged, updates, rename=lambda name: name, peft_bounds=None):
    """Apply ``updates`` with mdiff and compare every parameter with PEFT's merge.

    ``peft_bounds`` gives, by name, the update whose §7.5 bound PEFT's merge is held to, where that
    is not the imported one (factors folded to a lower rank have a tighter bound than PEFT's sum).
    """
    result = mdiff.apply(base, updates)
    assert set(result) == set(base)
    counts = {"low_rank": 0, "replace": 0, "unchanged": 0}
    for name, value in result.items():
        expected = merged[rename(name)]
        update = updates.get(name)
        if update is None:
            assert np.array_equal(as_bits(value), as_bits(base[name])), name
            assert np.array_equal(as_bits(expected), as_bits(base[name])), f"PEFT changed {name}, mdiff did not"
            counts["unchanged"] += 1
        elif update.type == "low_rank":
            assert value.dtype == base[name].dtype and value.shape == base[name].shape
            assert within_tolerance(value, base[name], update), name
            # PEFT sums in another order: its merge must meet the same bound around the exact value.
            bound = (peft_bounds or {}).get(name, update)
            assert within_tolerance(expected, base[name], bound), f"PEFT's merge of {name} differs beyond §7.5"
            assert not np.array_equal(expected, base[name]), f"{name}: a no-op delta proves nothing"
            counts["low_rank"] += 1
        else:
            assert update.type == "replace", name
            assert np.array_equal(as_bits(value), as_bits(expected)), name
            counts["replace"] += 1
    return counts


# ------------------------------------------------------------------ adapters that import


def test_plain_lora(tmp_path):
    base_path, adapter, base, merged = _make(
        tmp_path, _bert, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "key", "value", "dense"]),
    )
    updates = lora_updates_from_checkpoint(adapter, base_path)
    counts = _check(base, merged, updates)
    # 2 layers × (query, key, value, attention.output.dense, intermediate.dense, output.dense) + the pooler's dense
    assert counts == {"low_rank": 13, "replace": 0, "unchanged": len(base) - 13}
    for update in updates.values():
        assert update.meta["scale"] == 2.0 and "lossy" not in update.meta  # the adapter's own factors: not lossy
        assert update.data["A"].shape[1] == 4 and update.data["A"].dtype == np.float32


def test_bfloat16_base(tmp_path):
    base_path, adapter, base, merged = _make(
        tmp_path, lambda: _bert().to(torch.bfloat16), LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]),
    )
    updates = lora_updates_from_checkpoint(adapter, base_path)
    assert _check(base, merged, updates)["low_rank"] == 4
    for update in updates.values():
        # the update has the parameter's dtype; its factors the compute dtype, float32
        assert update.dtype.name == "bfloat16" and update.data["A"].dtype == np.float32


def test_rslora_and_lora_bias(tmp_path):
    base_path, adapter, base, merged = _make(
        tmp_path, _bert, LoraConfig(r=3, lora_alpha=8, use_rslora=True, lora_bias=True, target_modules=["query", "value"]),
    )
    updates = lora_updates_from_checkpoint(adapter, base_path)
    counts = _check(base, merged, updates)
    # weight and bias of query and value in 2 layers; the biases are rank-1 updates bias · [[1]]
    assert counts["low_rank"] == 8 and counts["replace"] == 0
    for name, update in updates.items():
        assert update.meta["scale"] == 8 / math.sqrt(3)
        assert update.data["A"].shape[1] == (1 if name.endswith(".bias") else 3)


def test_rank_and_alpha_patterns_and_prefix_mapping(tmp_path):
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32,
    )

    def llama():
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(config).eval()

    def bare(full):  # the base checkpoint is the bare LlamaModel's ("layers.0…"); the adapter names "model.layers.0…"
        return {k.removeprefix("model."): v for k, v in full.items() if k.startswith("model.")}
    lora = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"],
        rank_pattern={r"layers.0.self_attn.q_proj": 2, "v_proj": 6},  # keys are regexes matched on a suffix
        alpha_pattern={r"layers\.1\..*": 3, "k_proj": 20},  # the first key that matches, in the file's order, wins
    )
    base_path, adapter, base, merged = _make(tmp_path, llama, lora, base_of=bare)
    updates = lora_updates_from_checkpoint(adapter, base_path)
    counts = _check(base, merged, updates, rename=lambda name: "model." + name)
    assert counts["low_rank"] == 10 and counts["replace"] == 0

    def rank_scale(name):
        return updates[name].data["A"].shape[1], updates[name].meta["scale"]

    assert rank_scale("layers.0.self_attn.q_proj.weight") == (2, 8 / 2)
    assert rank_scale("layers.1.self_attn.q_proj.weight") == (4, 3 / 4)
    assert rank_scale("layers.0.self_attn.v_proj.weight") == (6, 8 / 6)
    assert rank_scale("layers.1.self_attn.v_proj.weight") == (6, 3 / 6)
    assert rank_scale("layers.0.self_attn.k_proj.weight") == (4, 20 / 4)
    # PEFT saves the config with sorted keys, so "k_proj" comes before "layers\.1\..*" in the file
    assert list(json.loads((adapter / "adapter_config.json").read_text())["alpha_pattern"]) == ["k_proj", r"layers\.1\..*"]
    assert rank_scale("layers.1.self_attn.k_proj.weight") == (4, 20 / 4)
    assert rank_scale("layers.0.mlp.gate_proj.weight") == (4, 8 / 4)

    # The same adapter against the full LlamaForCausalLM checkpoint: names taken as they are.
    full = _state(llama())
    specs = {name: (value.shape, dtype_of(value)) for name, value in full.items()}
    assert sorted(lora_updates(adapter, specs)) == sorted("model." + name for name in updates)


def test_gpt2_fan_in_fan_out(tmp_path):
    def gpt2():
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=64, n_embd=HIDDEN, n_layer=2, n_head=2, n_positions=16)
        return transformers.GPT2LMHeadModel(config).eval()

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)
    base_path, adapter, base, merged = _make(tmp_path, gpt2, lora)
    assert base["transformer.h.0.attn.c_attn.weight"].shape == (HIDDEN, 3 * HIDDEN)  # Conv1D: in × out
    updates = lora_updates_from_checkpoint(adapter, base_path)
    counts = _check(base, merged, updates)
    assert counts["low_rank"] == 8 and counts["replace"] == 0
    update = updates["transformer.h.0.attn.c_attn.weight"]
    assert update.data["A"].shape == (HIDDEN, 4) and update.data["B"].shape == (4, 3 * HIDDEN)

    # The flag decides the layout: flipped, the factors no longer fit c_attn (32 × 96).
    config_path = adapter / "adapter_config.json"
    raw = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**raw, "fan_in_fan_out": False}))
    with pytest.raises(ApplyError) as info:
        lora_updates_from_checkpoint(adapter, base_path)
    assert info.value.code == "MD601" and "fan_in_fan_out" in info.value.message


def test_bert_classifier_embedding_lora_modules_to_save_and_biases(tmp_path):
    lora = LoraConfig(
        r=4, lora_alpha=8, task_type="SEQ_CLS", bias="lora_only",
        target_modules=["query", "value", "word_embeddings"],  # SEQ_CLS adds modules_to_save=["classifier", "score"]
    )
    base_path, adapter, base, merged = _make(tmp_path, lambda: _bert(transformers.BertForSequenceClassification), lora)
    updates = lora_updates_from_checkpoint(adapter, base_path)
    counts = _check(base, merged, updates)
    # LoRA on query, value (2 layers) and the word embeddings; the head and the four trained biases replaced
    assert counts["low_rank"] == 5 and counts["replace"] == 6
    embedding = updates["bert.embeddings.word_embeddings.weight"]
    assert embedding.data["A"].shape == (64, 4) and embedding.data["B"].shape == (4, HIDDEN)
    assert updates["classifier.weight"].type == "replace"
    assert updates["bert.encoder.layer.0.attention.self.query.bias"].type == "replace"  # saved as …base_layer.bias

    # Without the base's values every full value becomes a replace too; with them, equal ones are left out.
    with open_checkpoint(base_path) as reader:
        specs = {name: reader.spec(name) for name in reader.keys()}
    assert sorted(lora_updates(adapter, specs)) == sorted(updates)


def test_conv_lora_and_rank_above_min_dimension(tmp_path):
    base_path, adapter, base, merged = _make(
        tmp_path, _tiny_conv, LoraConfig(r=4, lora_alpha=8, target_modules=["conv1", "conv2", "head"]),
    )
    updates = lora_updates_from_checkpoint(adapter, base_path)
    # head is 2 × 6: rank 4 exceeds what §7.5 allows, so the product is stored at rank 2
    assert updates["head.weight"].data["A"].shape == (2, 2)
    with open_checkpoint(adapter / "adapter_model.safetensors") as factors:
        lora_b, lora_a = (factors.read(f"base_model.model.head.lora_{x}.weight") for x in "BA")
    rank4 = mdiff.low_rank(lora_b, lora_a, (2, 6), dtype_of(base["head.weight"]), 2.0)
    counts = _check(base, merged, updates, peft_bounds={"head.weight": rank4})
    assert counts == {"low_rank": 3, "replace": 0, "unchanged": 3}
    assert updates["conv1.weight"].data["B"].shape == (4, 3 * 3 * 3)
    assert within_tolerance(mdiff.apply(base, updates)["head.weight"], base["head.weight"], rank4)

    # The updates make a valid file, and applying the file gives the same result.
    path = tmp_path / "lora.mdiff"
    mdiff.write(path, updates)
    assert [f for f in mdiff.validate(path) if f.severity == "error"] == []
    out = tmp_path / "merged.safetensors"
    mdiff.apply_files(base_path, path, out)
    with open_checkpoint(out) as reader:
        for name in reader.keys():
            value = reader.read(name)
            if name in updates:
                assert within_tolerance(value, base[name], updates[name])
            else:
                assert np.array_equal(value, base[name])


def test_a_folded_product_adds_its_terms_in_order_whatever_the_blas():
    """Factors of a rank above min(m, n) are folded into their product, which is stored: its bits are a file's and
    a commit's id, so they come from additions in the order of k (as Python's floats make them), not from a BLAS
    kernel the CPU chooses."""
    from mdiff.integrations.peft import _product_in_order

    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((3, 7)).astype(np.float32), rng.standard_normal((7, 2)).astype(np.float32)
    expected = [[0.0] * 2 for _ in range(3)]
    for i in range(3):
        for j in range(2):
            total = 0.0
            for k in range(7):
                total += float(A[i, k]) * float(B[k, j])
            expected[i][j] = total
    assert _product_in_order(A, B).tolist() == expected
    # the order shows where terms cancel: ((2^53 + 1) + 1) - 2^53 is 0 in order k, 2 paired as (1 + 1), 1 otherwise
    cancel = _product_in_order(np.array([[2.0**53, 1.0, 1.0, -2.0**53]]), np.ones((4, 1)))
    assert cancel.tolist() == [[0.0]]


# ------------------------------------------------------------------ refusals


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A plain adapter on BERT (query: 32 × 32, intermediate.dense: 37 × 32) to break in various ways."""
    tmp = tmp_path_factory.mktemp("refusals")
    base_path, adapter, base, _ = _make(tmp, _bert, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "intermediate.dense"]))
    return base_path, adapter, base


def _copy(adapter: Path, tmp_path: Path, **config_changes) -> Path:
    copy = tmp_path / "adapter"
    shutil.copytree(adapter, copy)
    raw = json.loads((copy / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**raw, **config_changes}))
    return copy


def test_dora_is_refused(tmp_path):
    base_path, adapter, _, _ = _make(tmp_path, _bert, LoraConfig(r=4, lora_alpha=8, use_dora=True, target_modules=["query"]))
    with pytest.raises(CheckpointError) as info:
        lora_updates_from_checkpoint(adapter, base_path)
    assert info.value.code == "MD701" and "DoRA" in info.value.message
    # Its magnitude vectors give it away even when the config does not say so.
    with pytest.raises(CheckpointError) as info:
        lora_updates_from_checkpoint(_copy(adapter, tmp_path / "x", use_dora=False), base_path)
    assert info.value.code == "MD701" and "DoRA" in info.value.message


def test_pickled_adapter_is_refused(tmp_path):
    base_path, adapter, _, _ = _make(tmp_path, _bert, LoraConfig(r=4, lora_alpha=8, target_modules=["query"]), safe=False)
    assert (adapter / "adapter_model.bin").exists() and not (adapter / "adapter_model.safetensors").exists()
    with pytest.raises(CheckpointError) as info:
        lora_updates_from_checkpoint(adapter, base_path)
    assert info.value.code == "MD700" and "safetensors" in info.value.message


def test_module_missing_from_base(saved, tmp_path):
    base_path, adapter, base = saved
    partial = tmp_path / "partial.safetensors"
    save_checkpoint(partial, {k: v for k, v in base.items() if k != "encoder.layer.1.attention.self.query.weight"})
    with pytest.raises(ApplyError) as info:
        lora_updates_from_checkpoint(adapter, partial)
    assert info.value.code == "MD600" and info.value.path == "encoder.layer.1.attention.self.query.weight"


def test_shape_mismatch(saved, tmp_path):
    base_path, adapter, base = saved
    other = tmp_path / "other.safetensors"
    name = "encoder.layer.0.intermediate.dense.weight"
    save_checkpoint(other, {**base, name: np.ascontiguousarray(base[name].T)})
    with pytest.raises(ApplyError) as info:
        lora_updates_from_checkpoint(adapter, other)
    assert info.value.code == "MD601" and info.value.path == name


def test_ambiguous_prefix(saved):
    _, adapter, base = saved
    specs = {}
    for name, value in base.items():
        for prefix in ("model.", "transformer."):
            specs[prefix + name] = (value.shape, dtype_of(value))
    with pytest.raises(ApplyError) as info:
        lora_updates(adapter, specs)
    assert info.value.code == "MD600" and "ambiguous" in info.value.message


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"peft_type": "IA3"}, "peft_type"),
        ({"init_lora_weights": "pissa"}, "path_initial_model_for_weight_conversion"),
        ({"layer_replication": [[0, 2], [1, 2]]}, "layer_replication"),
        ({"target_parameters": ["weight"]}, "target_parameters"),
        ({"alora_invocation_tokens": [1, 2]}, "activated LoRA"),
        ({"r": 8}, "rank 4"),
        ({"rank_pattern": {"query": 2}}, "rank 4"),
        ({"target_modules": ["value"]}, "target_modules"),
        ({"lora_alpha": "8"}, "lora_alpha"),
    ],
)
def test_unsupported_or_inconsistent_config(saved, tmp_path, changes, words):
    base_path, adapter, _ = saved
    with pytest.raises(CheckpointError) as info:
        lora_updates_from_checkpoint(_copy(adapter, tmp_path, **changes), base_path)
    assert info.value.code == "MD701" and words in info.value.message


def test_not_an_adapter(saved, tmp_path):
    base_path, _, _ = saved
    with pytest.raises(CheckpointError) as info:
        lora_updates_from_checkpoint(tmp_path, base_path)
    assert info.value.code == "MD701" and "adapter_config.json" in info.value.message


def test_import_peft_into_a_repository_and_check_out(tmp_path, capsys):
    """The issue's end to end: `mdiff import-peft` on an empty repository commits the base, then the
    adapter; `mdiff checkout` gives merge_and_unload()'s weights within §7.5's tolerance."""
    from mdiff.checkpoints import load_checkpoint
    from mdiff.cli.main import main
    from mdiff.repo import Repository

    base_path, adapter, base, merged = _make(
        tmp_path, _bert, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]),
    )
    repo_dir = tmp_path / "repo"
    assert main(["init", str(repo_dir)]) == 0
    assert main(["import-peft", str(adapter), "--base", str(base_path), "-C", str(repo_dir), "--json"]) == 0
    made = json.loads(capsys.readouterr().out.splitlines()[-1])["commits"]
    repo = Repository.find(repo_dir)
    assert len(made) == 2 and repo.parents(made[1]) == (made[0],)
    assert main(["checkout", "HEAD", "-o", str(tmp_path / "out.safetensors"), "-C", str(repo_dir)]) == 0
    result = load_checkpoint(tmp_path / "out.safetensors")
    with mdiff.open(repo.commit_path(made[1])) as diff:
        assert {diff[n].type for n in diff} == {"low_rank"} and len(diff) == 4  # 2 layers × (query, value)
        for name in base:
            if name in diff:
                assert within_tolerance(result[name], base[name], diff[name]), name
                assert within_tolerance(merged[name], base[name], diff[name]), name
            else:
                assert np.array_equal(as_bits(result[name]), as_bits(base[name])), name
