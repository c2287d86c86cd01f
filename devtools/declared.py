"""Every role on the bus the code declares: each service's `services/<name>/consumers.py`
(found by walking `services/`, so a new service cannot be left out) and the operator
command's publications."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from types import ModuleType

import services
from libs.operator import publications as operator_publications
from libs.roles import ConsumerDeclaration, Publication

# Where a service declares its roles on the bus.
DECLARATIONS_MODULE = "consumers"


@dataclass(frozen=True, slots=True)
class Declared:
    """The durable consumers and the publications, in service order (by package name)."""

    consumers: tuple[ConsumerDeclaration, ...]
    publications: tuple[Publication, ...]


def service_modules() -> list[ModuleType]:
    """Each service's declarations module, by package name."""
    found: list[ModuleType] = []
    for package in sorted(pkgutil.iter_modules(services.__path__), key=lambda m: m.name):
        if not package.ispkg:
            continue
        name = f"{services.__name__}.{package.name}.{DECLARATIONS_MODULE}"
        if importlib.util.find_spec(name) is not None:
            found.append(importlib.import_module(name))
    return found


def declared() -> Declared:
    """Everything declared, checked for names that would collide."""
    consumers: list[ConsumerDeclaration] = []
    publications: list[Publication] = []
    for module in service_modules():
        consumers.extend(module.CONSUMERS)
        publications.extend(module.PUBLICATIONS)
    publications.extend(operator_publications.PUBLICATIONS)
    durables = [(c.service, c.role) for c in consumers]
    repeated = sorted({d for d in durables if durables.count(d) > 1})
    if repeated:
        raise ValueError(f"consumer roles declared twice: {repeated}")
    return Declared(tuple(consumers), tuple(publications))
