"""The message package: every message is reachable as ``vmpooler.actors.messages.X`` and is a
frozen, slotted dataclass (the rule of docs/architecture.md section 2)."""

from __future__ import annotations

import importlib
import pkgutil

import vmpooler.actors.messages as messages

_HELPERS = {"request_actor_name", "ProviderOp", "ProviderRequest", "ProviderResult",
            "CommandKind", "LeaseKind"}
# a function, enums and two unions of message types, not messages


def _modules() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(messages.__path__))


def test_the_package_re_exports_every_message_of_its_modules() -> None:
    assert _modules(), "no modules found under actors/messages/"
    missing = sorted(
        f"{module}.{name}" for module in _modules()
        for name in importlib.import_module(f"{messages.__name__}.{module}").__all__
        if name not in messages.__all__ or getattr(messages, name, None) is None
    )
    assert not missing, f"add these to actors/messages/__init__.py: {missing}"


def test_each_name_lives_in_one_module() -> None:
    seen: dict[str, str] = {}
    for module in _modules():
        for name in importlib.import_module(f"{messages.__name__}.{module}").__all__:
            assert name not in seen, f"{name} in both {seen[name]} and {module}"
            seen[name] = module
    assert set(seen) == set(messages.__all__)


def test_every_message_is_a_frozen_slotted_dataclass() -> None:
    wrong = []
    for name in sorted(set(messages.__all__) - _HELPERS):
        cls = getattr(messages, name)
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen or "__slots__" not in vars(cls):
            wrong.append(name)
    assert not wrong, f"not frozen, slotted dataclasses: {wrong}"
