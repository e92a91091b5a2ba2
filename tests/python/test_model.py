"""spillway.Model: generation, evaluation, the tokenizer, logits and weights
as arrays, against what the command line gives for the same model."""

import json
import shutil
import subprocess

import numpy as np
import pytest

import spillway
from conftest import run_cli, spillway_bin


@pytest.fixture(scope="module")
def model(trained_run):
    return spillway.Model.load(str(trained_run), device="cpu")


def cli_generation(run, prompt, *flags):
    """The text after the prompt and the ids that `spillway generate` writes."""
    out, err = run_cli("generate", "-m", run, "-p", prompt, "--device", "cpu", "--ids", *flags)
    ids_line = next(line for line in err.splitlines() if line.startswith("ids:"))
    assert out.startswith(prompt) and out.endswith("\n")
    return out[len(prompt):-1], [int(i) for i in ids_line.split()[1:]]


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.9, "top_k": 20, "seed": 5}])
def test_generate_gives_the_command_lines_tokens_and_text(trained_run, model, sampling):
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in sampling.items()]
    text, ids = cli_generation(trained_run, "The cat", "-n", "16", *flags)

    stream = model.generate("The cat", max_tokens=16, stream=True, **sampling)
    pieces = list(stream)
    assert stream.tokens == ids
    assert "".join(pieces) == text
    assert model.generate("The cat", max_tokens=16, **sampling) == text


def test_eval_gives_the_command_lines_loss(tmp_path, trained_run, model):
    texts = ["The cat sees the moon. A dog likes her song.", "Every child finds the small house."]
    files = []
    for i, t in enumerate(texts):
        files.append(tmp_path / f"t{i}.txt")
        files[-1].write_text(t)
    out, _ = run_cli("eval", "-m", trained_run, "--device", "cpu", "--json", "--data", *files)
    assert model.eval(texts) == pytest.approx(json.loads(out)["loss"], rel=1e-8)
    assert model.eval(texts[0]) == pytest.approx(model.eval([texts[0]]))


def test_the_tokenizer_round_trips_text(model):
    tok = model.tokenizer
    ids = tok.encode("The old man carries a red ball.", add_special_tokens=False)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == "The old man carries a red ball."
    assert len(tok) == tok.vocab_size == model.config["vocab_size"]


def test_logits_reach_numpy_through_dlpack_without_a_copy(model):
    ids = model.tokenizer.encode("The cat sees")
    logits = model.logits(ids)
    a = np.from_dlpack(logits)
    b = np.from_dlpack(logits)
    assert a.shape == (len(ids), model.config["vocab_size"]) and a.dtype == np.float32
    assert a.ctypes.data == b.ctypes.data == np.asarray(logits).ctypes.data  # one buffer, shared
    # The last row is what greedy generation draws from.
    first = model.generate("The cat sees", max_tokens=1, temperature=0.0, stream=True)
    list(first)
    assert first.tokens == [int(np.argmax(a[-1, : model.tokenizer.vocab_size]))]


def test_weights_are_the_models_own_memory(trained_run):
    m = spillway.Model.load(str(trained_run), device="cpu")
    ids = m.tokenizer.encode("A dog")
    before = np.from_dlpack(m.logits(ids)).copy()
    norm = np.from_dlpack(m.weights["model.norm.weight"])
    norm *= 2.0  # written through the view: the model's next logits change
    after = np.from_dlpack(m.logits(ids))
    assert not np.allclose(before, after)


def test_logits_reach_pytorch_without_a_copy(model):
    torch = pytest.importorskip("torch")
    logits = model.logits(model.tokenizer.encode("The cat"))
    t = torch.from_dlpack(logits)
    assert t.data_ptr() == np.from_dlpack(logits).ctypes.data
    assert torch.equal(t, torch.from_numpy(np.from_dlpack(logits)))


def test_a_corrupt_checkpoint_is_one_line_naming_the_file(tmp_path, trained_run):
    source = spillway.Model.load(str(trained_run)).source
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(spillway.Error) as e:
        spillway.Model.load(str(broken))
    message = str(e.value)
    assert "model.safetensors" in message and "\n" not in message
    # The command line says the same, after "spillway: ".
    done = subprocess.run([spillway_bin(), "generate", "-m", str(broken)], capture_output=True, text=True)
    assert done.stderr.strip() == f"spillway: {message}"


def test_a_missing_model_is_a_spillway_error(tmp_path):
    with pytest.raises(spillway.Error, match="nowhere"):
        spillway.Model.load(str(tmp_path / "nowhere"))
