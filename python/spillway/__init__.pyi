# Types of the spillway package for editors and type checkers. The settings
# of each RunConfig section are the run configuration's field table
# (src/train/run_config_fields.cc; tests/python/test_run_config.py checks
# that this file lists them all).
import os
from typing import Any, Callable, Iterator, Literal, Optional, Sequence, Union

import numpy.typing

_Path = Union[str, os.PathLike[str]]
_Bytes = Union[int, str]  # a byte count, or text such as "24GiB"

class Error(RuntimeError):
    """A spillway failure: str(e) is one line naming the file, setting or value and the problem."""

class ModelSection:
    config: str
    init_from: str

class DataSection:
    paths: list[str]
    separator: str
    vocab_size: int
    validation_fraction: float
    format: Literal["auto", "text", "instruction"]
    packing: bool

class OptimizerSection:
    lr: float
    min_lr: float
    warmup: int
    weight_decay: float
    grad_clip: float
    beta1: float
    beta2: float
    eps: float

class LoraSection:
    rank: int
    alpha: float
    dropout: float
    targets: str
    base: Literal["weights", "nf4", "nf4-dq"]

class ScheduleSection:
    steps: int
    stop_after: int
    batch: int
    seq: int
    grad_accum: int
    eval_every: int
    eval_batches: int
    checkpoint_every: int
    keep_checkpoints: int
    seed: int
    max_skipped_steps: int

class MemorySection:
    device_mem: _Bytes
    host_mem: _Bytes
    offload: Literal["auto", "on", "off", "stream"]
    recompute: Literal["none", "layers", "selective", "auto"]
    bf16_moments: bool

class KernelsSection:
    deterministic: bool
    own_gemm: bool
    cuda_graph: bool
    projections: Literal["auto", "fused", "separate"]
    matmul_candidates: int
    loss_chunk_rows: int

class ParallelSection:
    dp: int
    tp: int
    sequence_parallel: bool
    pp: int
    virtual_stages: int
    cp: int
    nproc_per_node: int
    timeout_s: int
    shard: Literal["auto", "none", "optimizer", "gradients", "weights"]

class RunSection:
    device: Literal["auto", "cpu", "cuda"]
    out: str
    resume: bool
    overwrite: bool
    threads: int
    quiet: bool

class SampleSection:
    tokens: int
    prompt: str
    temperature: float
    top_k: int

class RunConfig:
    """The typed configuration of a run: what `spillway train run.toml --flag ...` resolves (docs/run_config.md)."""

    model: ModelSection
    data: DataSection
    optimizer: OptimizerSection
    lora: LoraSection
    schedule: ScheduleSection
    memory: MemorySection
    kernels: KernelsSection
    parallel: ParallelSection
    run: RunSection
    sample: SampleSection
    def __init__(
        self,
        file: Optional[_Path] = None,
        *,
        command: Literal["train", "finetune", "bench", "plan"] = "train",
        **settings: Any,
    ) -> None:
        """Defaults of `command`, then the run file (.toml or .json), then the environment variables the
        command line reads, then `settings`: a section as a dict (schedule={"steps": 10}) or a setting by
        its name (steps=10)."""
    @property
    def command(self) -> str: ...
    def get(self, key: str) -> Any:
        """A setting's value by its dotted key ("schedule.steps") or its name."""
    def set(self, key: str, value: Any) -> None:
        """Sets a setting by its dotted key or name, checked as a run file's value is."""
    def to_dict(self) -> dict[str, dict[str, Any]]: ...
    def to_toml(self) -> str:
        """The settings as a run file that `spillway <command> FILE` reads back."""
    def check(self) -> None: ...
    @staticmethod
    def fields() -> list[dict[str, Any]]:
        """Every setting: key, flag, help, the values it takes and the commands that use it."""

class TrainResult:
    steps_done: int
    train_loss: float
    validation_loss: Optional[float]
    unigram_entropy: float
    tokens_per_second: float
    peak_device_bytes: int
    checkpoint: str
    sample: str
    stopped: bool

def train(config: RunConfig, on_step: Optional[Callable[[dict[str, Any]], Optional[bool]]] = None) -> TrainResult:
    """Trains as `config` says, in this process. on_step(record) hears each step's record as
    train_log.jsonl has it (step, loss, lr, grad_norm, tokens, epoch, tok_per_s, elapsed_s);
    returning False stops the run there with a checkpoint; an exception it raises stops it likewise
    and is raised on. Ctrl-C stops the run at the next step boundary with a checkpoint and raises
    KeyboardInterrupt. The GIL is released while steps run."""

class Plan:
    """A training step planned before it runs (docs/offload.md); figures are per GPU."""

    name: str
    layers: int
    parameters: int
    batch: int
    seq: int
    micro_batches: int
    gpus: int
    layout: str
    stacked_projections: bool
    recompute: str
    sharded: bool
    device_budget: int
    device_resident_bytes: int
    device_peak_bytes: int
    device_workspace_bytes: int
    minimum_device_budget: int
    host_budget: int
    host_state_bytes: int
    host_peak_bytes: int
    host_to_device_bytes: int
    device_to_host_bytes: int
    bytes_communicated: int
    communication_seconds: float
    gpu: str
    step_seconds: float
    micro_batch_seconds: float
    compute_seconds: float
    copy_wait_seconds: float
    optimizer_seconds: float
    tokens_per_second: float
    mfu: float
    timeline_svg: str

def plan(
    config: RunConfig, *, gpus: int = 1, gpu: Literal["H100", "H200"] = "H100", auto_batch: bool = False,
    largest: bool = False
) -> Plan:
    """Plans `config`'s training step as `spillway plan` does."""

class Tokenizer:
    vocab_size: int
    bos_id: int
    eos_id: int
    def encode(self, text: str, add_special_tokens: bool = True, allow_special: bool = False) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def __len__(self) -> int: ...

class Generation(Iterator[str]):
    """Text pieces of one generation, as they come."""

    tokens: list[int]
    def __iter__(self) -> Generation: ...
    def __next__(self) -> str: ...

class _Array:
    """A float32 array NumPy (numpy.from_dlpack) and PyTorch (torch.from_dlpack) take without a copy."""

    shape: tuple[int, ...]
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> numpy.typing.NDArray[Any]: ...

class Model:
    """A LLaMA-family model and its tokenizer, loaded for running."""

    source: str
    config: dict[str, Any]
    tokenizer: Tokenizer
    weights: dict[str, _Array]
    @staticmethod
    def load(path: _Path, device: Literal["auto", "cpu", "cuda"] = "auto") -> Model: ...
    def generate(
        self, prompt: str = "", *, max_tokens: int = 200, temperature: float = 0.8, top_k: int = 0,
        top_p: float = 1.0, seed: int = 0, stream: bool = False
    ) -> Union[str, Generation]: ...
    def eval(self, texts: Union[str, Sequence[str]], seq: int = 0) -> float: ...
    def logits(self, ids: Sequence[int]) -> _Array: ...
