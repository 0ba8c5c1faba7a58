"""What the GPU check needs installed, against what the GPU image has and what
``gpu_check.sh`` carries as wheels (its ``WHEELS``): ``gpu_check.sh prepare`` runs this first,
and ``tests/test_gpu_packages.py`` asserts it finds nothing.

    python benchmarks/gpu_packages.py [--wheels DIR]   # exit 1, with each problem, if any

``--wheels DIR`` also checks that DIR (``prepare``'s ``.gpu-check/whl``) holds a wheel of every
name in ``WHEELS`` and of normzoo, and nothing else.

The needs: the project's dependencies (``pyproject.toml``), and the distributions that the
files the check runs import (the gpu-marked tests and the helpers they import, the benchmark
scripts and theirs: ``x-transformers`` and ``transformers`` for the peers, ``pytest``), followed
through their own requirements as this environment's ``importlib.metadata`` records them
(``Requires-Dist``, markers evaluated for CPython 3.12 on x86-64 Linux, extras followed where a
requirement names them). A package the image has and the check does not carry is the image's
build, which brings what it requires (torch its ``nvidia-*`` and ``triton``): its requirements
are not followed, since this environment's version of it (often newer) is not the image's and
may require what the image's does not. Names are compared normalised (lower case, ``_`` and
``.`` as ``-``).

Problems: a needed package in neither the image (``gpu_image_packages.txt``) nor ``WHEELS``; a
needed package whose image version (where the list knows it) a requirement excludes, and which
``WHEELS`` does not carry; a wheel the image already has without a ``#   NAME: why`` comment in
``gpu_check.sh`` saying why its version must differ; a wheel nothing needs; a wheel this
environment does not have installed (its version is the one downloaded).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
TESTS = REPO / "tests"
SCRIPT = BENCHMARKS / "gpu_check.sh"
IMAGE = BENCHMARKS / "gpu_image_packages.txt"
# The benchmark scripts gpu_check.sh runs (their local imports are followed).
ENTRY_SCRIPTS = ("peers.py", "gpu_step.py", "gpu_train.py", "gpu_summary.py",
                 "attention_backends.py")
PROJECT = "normzoo"
# The GPU machine's interpreter, for environment markers.
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "implementation_version": "3.12.3",
          "platform_python_implementation": "CPython", "platform_release": "",
          "platform_version": ""}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = IMAGE) -> dict[str, Version | None]:
    """The image's packages, normalised, with the version where the list gives one."""
    packages: dict[str, Version | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            packages[normalise(name)] = Version(version) if version else None
    return packages


def script_wheels(path: Path = SCRIPT) -> list[str]:
    """The names in ``gpu_check.sh``'s ``WHEELS="..."``, normalised."""
    found = re.search(r'^WHEELS="([^"]*)"', path.read_text(encoding="utf-8"), re.MULTILINE)
    if not found:
        raise ValueError(f"{path}: no WHEELS=\"...\"")
    return [normalise(n) for n in found.group(1).split()]


def explained_wheels(path: Path = SCRIPT) -> set[str]:
    """Names that a ``#   NAME: why`` comment in ``gpu_check.sh`` explains."""
    return {normalise(m) for m in re.findall(r"^#\s+([A-Za-z0-9_.\-]+):\s+\S",
                                             path.read_text(encoding="utf-8"), re.MULTILINE)}


def project_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    return [Requirement(r) for r in data["project"]["dependencies"]]


def gpu_marked_tests(tests: Path = TESTS) -> list[Path]:
    """The test files the check's ``tests`` step runs: those with a ``gpu`` mark."""
    return sorted(p for p in tests.glob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def imported_modules(path: Path) -> set[str]:
    """Top-level names of the absolute imports anywhere in ``path`` (inside functions too:
    a benchmark imports its peers' libraries where it builds them)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def third_party_imports(files: Iterable[Path]) -> set[str]:
    """The modules that ``files`` and the local modules they import (same folder) import,
    without the standard library's, the project's and the local ones."""
    seen: set[Path] = set()
    todo, found = list(files), set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for name in imported_modules(path):
            local = path.parent / f"{name}.py"
            if local.is_file():
                todo.append(local)
            elif name not in sys.stdlib_module_names and name not in (PROJECT, "__future__"):
                found.add(name)
    return found


def check_imports() -> tuple[list[Requirement], list[str]]:
    """Requirements for the modules the check's files import, and the modules no installed
    distribution provides."""
    files = [TESTS / "conftest.py", *gpu_marked_tests(),
             *(BENCHMARKS / name for name in ENTRY_SCRIPTS)]
    providers = metadata.packages_distributions()
    requirements, unknown = [], []
    for module in sorted(third_party_imports(files)):
        if module in providers:
            requirements += [Requirement(d) for d in sorted(set(providers[module]))]
        else:
            unknown.append(module)
    return requirements, unknown


def _installed_requires(name: str) -> list[str] | None:
    try:
        return metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return None


@dataclass
class Closure:
    """Every package reached, and each requirement met on the way (who asked, what)."""

    packages: set[str] = field(default_factory=set)
    edges: list[tuple[str, Requirement]] = field(default_factory=list)
    not_installed: set[str] = field(default_factory=set)


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**TARGET, "extra": extra})
               for extra in extras | {""})


def closure(roots: Iterable[Requirement], stop: set[str] = frozenset(),
            requires: Callable[[str], list[str] | None] = _installed_requires) -> Closure:
    """``roots`` and everything they require, transitively, except what the packages in
    ``stop`` (normalised names: the image's) require; ``requires(name)`` is a distribution's
    ``Requires-Dist`` (None: not installed here, so its own requirements cannot be
    followed)."""
    out = Closure()
    todo = [("the check", r) for r in roots]
    expanded: set[tuple[str, frozenset[str]]] = set()
    while todo:
        parent, requirement = todo.pop()
        name = normalise(requirement.name)
        out.edges.append((parent, requirement))
        out.packages.add(name)
        key = (name, frozenset(requirement.extras))
        if name in stop or key in expanded:
            continue
        expanded.add(key)
        listed = requires(requirement.name)
        if listed is None:
            out.not_installed.add(name)
            continue
        for text in listed:
            child = Requirement(text)
            if _applies(child, {normalise(e) for e in requirement.extras}):
                todo.append((name, child))
    return out


def problems(wheels: list[str] | None = None, image: dict[str, Version | None] | None = None,
             roots: list[Requirement] | None = None,
             explained: set[str] | None = None) -> list[str]:
    """Everything wrong with ``WHEELS`` against the image and the needs (see the module's
    docstring); empty when the check will find every package it imports."""
    wheels = script_wheels() if wheels is None else wheels
    image = image_packages() if image is None else image
    explained = explained_wheels() if explained is None else explained
    found: list[str] = []
    if roots is None:
        imported, unknown = check_imports()
        roots = [*project_requirements(), *imported]
        found += [f"import {m}: no installed distribution provides it (install the project's "
                  "dev extra)" for m in unknown]
    carried = set(wheels)
    needed = closure(roots, stop=set(image) - carried)
    for name in sorted(needed.packages - {PROJECT}):
        if name not in image and name not in carried:
            askers = sorted({p for p, r in needed.edges if normalise(r.name) == name})
            found.append(f"{name}: needed by {', '.join(askers)} but neither in the image "
                         "nor in WHEELS")
    for parent, requirement in needed.edges:
        name = normalise(requirement.name)
        version = image.get(name)
        if (version is not None and name not in carried and requirement.specifier
                and not requirement.specifier.contains(version, prereleases=True)):
            found.append(f"{name}: the image has {version}, {parent} needs "
                         f"{requirement.specifier}: carry it in WHEELS")
    for name in wheels:
        if name in image and name not in explained:
            found.append(f"{name}: the image has it; carry it only with a '#   {name}: why' "
                         "comment in gpu_check.sh saying why its version must differ")
        if name not in needed.packages:
            found.append(f"{name}: in WHEELS but nothing needs it")
        if _installed_requires(name) is None:
            found.append(f"{name}: in WHEELS but not installed here (prepare downloads the "
                         "version installed here)")
    return found


def wheel_files(folder: Path) -> dict[str, Path]:
    """The wheels in ``folder`` by their distribution's normalised name."""
    return {normalise(path.name.split("-")[0]): path for path in sorted(folder.glob("*.whl"))}


def wheel_problems(folder: Path, wheels: list[str]) -> list[str]:
    """What a prepared wheel folder lacks, or holds that ``WHEELS`` does not name."""
    files = wheel_files(folder)
    wanted = [*wheels, PROJECT]
    found = [f"{name}: no wheel in {folder}" for name in wanted if name not in files]
    found += [f"{path.name}: in {folder} but not in WHEELS (a stale download?)"
              for name, path in files.items() if name not in wanted]
    return found


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=None,
                        help="also check this folder of prepared wheels")
    args = parser.parse_args(argv)
    imported, _ = check_imports()
    image, wheels = image_packages(), set(script_wheels())
    needed = closure([*project_requirements(), *imported], stop=set(image) - wheels)
    from_image = sorted(n for n in needed.packages if n in image and n not in wheels)
    print(f"{len(needed.packages)} packages needed: {len(from_image)} from the image, "
          f"{len(wheels & needed.packages)} carried ({', '.join(sorted(wheels))})")
    found = problems()
    if args.wheels is not None:
        if args.wheels.is_dir():
            found += wheel_problems(args.wheels, script_wheels())
            files = wheel_files(args.wheels).values()
            print(f"{len(files)} wheels in {args.wheels}, "
                  f"{sum(f.stat().st_size for f in files) / 2**20:.1f} MiB")
        else:
            print(f"{args.wheels}: not prepared (bash benchmarks/gpu_check.sh prepare)")
    for line in found:
        print(f"  problem: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
