"""Some blocks of a config (`blocks_of`): a stage's view of the run's config (`wm.stages.contract`). Reading a block
it does not hold is refused, naming the owner and where it declares what it reads; it has no hash, and
`wm.envs.setup.setup` refuses it: the env facts come resolved from the whole config beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wm.core.config import Config


class Sections(Config):
    """The blocks of a config that `owner` declared it reads (`blocks_of`)."""

    def __init__(self, data: Mapping[str, Any], owner: str):
        super().__init__(data)
        object.__setattr__(self, "_owner", owner)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any], str]]:
        return Sections, (self.to_dict(), self._owner)  # sent to a worker with its stage's inputs

    def _undeclared(self, name: str) -> AttributeError:
        return AttributeError(
            f"{self._owner} reads the config block {name!r}, which it does not declare (Stage.uses in wm/core/registry.py)"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._data:
            raise self._undeclared(name)
        return self._data[name]

    def __getitem__(self, key: str) -> Any:
        if key.split(".")[0] not in self._data:
            raise self._undeclared(key.split(".")[0])
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:  # asking whether it holds a block is not reading one
        return isinstance(key, str) and key.split(".")[0] in self._data and super().__contains__(key)

    def hash(self) -> str:
        raise TypeError(f"{self._owner} holds some blocks of the config: the run's hash is StageInput.config_hash")


def blocks_of(cfg: Config, names: tuple[str, ...], owner: str) -> Sections:
    """The blocks `names` of `cfg` and nothing else: what `owner` (a stage) declared it reads."""
    return Sections({k: v for k, v in cfg.items() if k in names}, owner)
