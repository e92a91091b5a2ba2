"""spillway from Python: the same library as the `spillway` command, in-process.

    cfg = spillway.RunConfig(steps=100, out="runs/demo")
    spillway.train(cfg, on_step=lambda record: print(record["loss"]))
    m = spillway.Model.load("runs/demo")
    print(m.generate("The cat", max_tokens=20))
"""

from ._spillway import (
    Error,
    Generation,
    Model,
    Plan,
    Tokenizer,
    TrainResult,
    plan,
    train,
)
from ._spillway import RunConfig as _NativeRunConfig

__all__ = ["Error", "Generation", "Model", "Plan", "RunConfig", "Tokenizer", "TrainResult", "plan", "train"]


class _Section:
    """One section of a RunConfig (config.schedule, config.memory, ...): its
    settings as attributes, read and set through the run configuration."""

    __slots__ = ("_config", "_name")

    def __init__(self, config, name):
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_name", name)

    def _keys(self):
        prefix = self._name + "."
        return [f["key"] for f in _FIELDS if f["key"].startswith(prefix) and self._config.command in f["commands"]]

    def __getattr__(self, name):
        if name.startswith("_"):  # Python's own probes (copy, pickle, IPython): not settings
            raise AttributeError(name)
        return self._config.get(f"{self._name}.{name}")

    def __setattr__(self, name, value):
        self._config.set(f"{self._name}.{name}", value)

    def __dir__(self):
        return [k.split(".", 1)[1] for k in self._keys()]

    def __repr__(self):
        values = ", ".join(f"{k.split('.', 1)[1]}={self._config.get(k)!r}" for k in self._keys())
        return f"{self._name}({values})"


class RunConfig(_NativeRunConfig):
    __doc__ = _NativeRunConfig.__doc__

    def __init__(self, file=None, *, command="train", **settings):
        super().__init__(file, command=command, **settings)

    def __getattr__(self, name):
        if name in _SECTIONS:
            return _Section(self, name)
        raise AttributeError(f"RunConfig has no section {name!r} (sections: {', '.join(_SECTIONS)})")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_SECTIONS))

    def __repr__(self):
        return f"RunConfig(command={self.command!r}, {self.to_dict()!r})"


_FIELDS = _NativeRunConfig.fields()
_SECTIONS = list(dict.fromkeys(f["key"].split(".", 1)[0] for f in _FIELDS))
