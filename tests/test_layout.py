"""The package's layout as a newcomer meets it: a top level of packages named by job, no
import cycle, no two modules named alike, no module (of the package, the benchmarks or the
studies) over 330
lines, a checkpoint loaded in one pass downward, and the old import paths of the 0.1 layout gone
(no compatibility code before a first release)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from registered import declared

import normzoo

ROOT = Path(normzoo.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def test_the_top_level_holds_packages_and_at_most_three_modules_beside_init():
    loose = sorted(path.name for path in ROOT.glob("*.py") if path.name != "__init__.py")
    assert len(loose) <= 3, loose
    assert set(loose) <= {"__main__.py", "errors.py"}, loose


def test_no_two_modules_of_a_package_differ_only_by_a_suffix():
    """``checkpoint``, ``checkpoint_files`` and ``checkpointing`` side by side made a reader
    open all three to find one job; within a package no name may extend another."""
    clashes = []
    for folder in {path.parent for path in ROOT.rglob("*.py")}:
        stems = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("__"))
        stems += sorted(p.name for p in folder.iterdir()
                        if p.is_dir() and (p / "__init__.py").is_file())
        clashes += [(str(folder.relative_to(ROOT)), a, b)
                    for a in stems for b in stems if a != b and b.startswith(a)]
    assert clashes == []


MAX_LINES = 330  # the project's rule; tables of data may live in a data file instead
# Over the limit while another change splits them, each with why; an entry fails the test once
# its module is within the limit again, so that none stays here after its split.
AWAITING_SPLIT: dict[str, str] = {}


def over_the_limit(root: Path, folders: list[str]) -> dict[str, int]:
    """Every module under ``folders`` of ``root`` longer than MAX_LINES: its line count, by its
    path from ``root``."""
    counts = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines())
              for folder in folders for p in sorted((root / folder).rglob("*.py"))}
    return {path: n for path, n in counts.items() if n > MAX_LINES}


def test_every_module_of_the_package_the_benchmarks_and_the_studies_has_at_most_330_lines():
    """A module a reader cannot hold in mind has more than one job: split it where its jobs
    part, each part named for what it holds."""
    over = over_the_limit(ROOT.parent, ["normzoo", "benchmarks", "studies"])
    offenders = {path: n for path, n in over.items() if path not in AWAITING_SPLIT}
    assert not offenders, (f"over {MAX_LINES} lines: "
                           + ", ".join(f"{path} ({n})" for path, n in offenders.items()))
    split_already = sorted(set(AWAITING_SPLIT) - set(over))
    assert not split_already, f"within {MAX_LINES} lines now, drop from AWAITING_SPLIT: " \
                              f"{split_already}"


def test_the_line_limit_names_a_longer_module_at_any_depth(tmp_path: Path):
    """Not vacuous: 331 lines are one too many, 330 are not, in a subpackage as at the top."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "fits.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "long.py").write_text("x = 1\n" * 400)
    assert over_the_limit(tmp_path, ["pkg"]) == {"pkg/sub/long.py": MAX_LINES + 1}


def top_level_imports(path: Path) -> set[str]:
    """The first name of every module ``path`` imports, relative imports left out."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_the_benchmarks_measure_cost_and_the_studies_live_apart():
    """benchmarks/ measures what normzoo costs (speed, memory); the findings are studies/'s study
    files (issue 58), rendered by ``normzoo study report``. Neither imports the other's code (a
    study reads the benchmarks' result files only), studies/README.md gives each study file's
    render command and its page says it was written by the report, and what is particular to
    the studies stays within 1,000 lines of Python."""
    repo = ROOT.parent
    benchmarks, studies = repo / "benchmarks", repo / "studies"
    assert sorted(p.name for p in benchmarks.iterdir() if p.name.startswith("study")) == []
    bench_modules = {p.stem for p in benchmarks.glob("*.py")}
    crossing = [f"{p.relative_to(repo)} imports studies" for p in benchmarks.rglob("*.py")
                if "studies" in top_level_imports(p)]
    crossing += [f"{p.relative_to(repo)} imports {sorted(top_level_imports(p) & bench_modules)}"
                 for p in studies.rglob("*.py") if top_level_imports(p) & bench_modules]
    assert crossing == []
    readme = (studies / "README.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in studies.glob("*.yaml"))
    assert files == ["classify-init.yaml", "depth.yaml", "llama.yaml", "precision.yaml",
                     "quickstart-schemes.yaml"]
    for name in files:
        command = re.search(rf"`normzoo study report studies/{re.escape(name)} --from (\S+) "
                            r"--out (\S+?)[` ]", readme)
        assert command, f"studies/README.md gives no render command for {name}"
        page = repo / command[2] / "index.md"
        assert "written by `normzoo study report`" in page.read_text(encoding="utf-8"), page
    python = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in studies.rglob("*.py"))
    assert python <= 1000, f"studies/ holds {python} lines of Python"


def imported_modules(path: Path) -> set[str]:
    """The normzoo modules ``path`` imports, at module level or inside functions, each
    ``from X import y`` counted as ``X.y`` where that is a module and as ``X`` otherwise."""
    found = set()
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != here}


def test_no_import_cycle():
    graph = {name: imported_modules(path) for name, path in MODULES.items()}
    done: set[str] = set()
    cycles = []

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name):], name])
            return
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


def test_the_cycle_check_sees_the_imports_that_made_the_old_cycles():
    """Not vacuous: the imports are read, function-level ones too; the two cycles this layout
    removed were machine -> recipe -> loading -> machine and config <-> resolve."""
    graph = {name: imported_modules(path) for name, path in MODULES.items()}
    assert "normzoo.recipe" in graph["normzoo.run.machine"]
    assert "normzoo.run.machine" not in graph["normzoo.recipe.loading"]
    assert "normzoo.models.component" in graph["normzoo.models.resolve"]
    assert "normzoo.models.resolve" in graph["normzoo.models.config"]
    assert "normzoo.models.config" not in graph["normzoo.models.resolve"]
    assert "normzoo.checkpoints.reading" in graph["normzoo.inference.load"]


def test_loading_a_checkpoint_enters_each_module_once_on_its_way_down(tiny_checkpoint: Path):
    """``normzoo evaluate`` loads through :func:`normzoo.inference.load.load`: it reads and
    checks the file, checks the plugins, rebuilds the model and hands back a ``Loaded``, each
    module entered once, and no module calls back into one that called it."""
    from normzoo.inference.load import load

    entries: list[tuple[str, str]] = []  # (caller module, callee module), across modules
    back_up: list[str] = []

    def module_of(frame) -> str:
        return frame.f_globals.get("__name__", "")

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = module_of(frame)
        if not callee.startswith("normzoo."):
            return
        stack, outer = [], frame.f_back
        while outer is not None:
            name = module_of(outer)
            if name.startswith("normzoo.") and (not stack or stack[-1] != name):
                stack.append(name)
            outer = outer.f_back
        caller = stack[0] if stack else "test"
        if caller != callee:
            entries.append((caller, callee))
            if callee in stack[1:] and callee.startswith(("normzoo.checkpoints",
                                                           "normzoo.inference")):
                back_up.append(f"{caller} -> {callee} (on the stack: {stack})")

    sys.setprofile(profile)
    try:
        loaded = load(tiny_checkpoint)
    finally:
        sys.setprofile(None)
    assert loaded.model is not None and not loaded.model.training
    assert back_up == []
    from_load = [callee for caller, callee in entries if caller == "normzoo.inference.load"]
    ours = [callee for callee in from_load if callee.startswith("normzoo.checkpoints")]
    assert ours == ["normzoo.checkpoints.reading", "normzoo.checkpoints.plugins",
                    "normzoo.checkpoints.rebuild"]
    for module in ours:  # entered from load only, and once
        assert [caller for caller, callee in entries if callee == module] == [
            "normzoo.inference.load"], module


# Names plugins and scripts imported from the 0.1 layout, each with where it lives now.
# The 0.1 layout's module paths: gone without a shim before a first release (CHANGELOG.md).
OLD_PATHS = [
    "normzoo.registry_entry",
    "normzoo.options",
    "normzoo.checkpoint",
    "normzoo.checkpoint_files",
    "normzoo.checkpointing",
    "normzoo.atomic",
    "normzoo.decoding",
    "normzoo.evaluate",
    "normzoo.scoring",
    "normzoo.card",
    "normzoo.hf",
    "normzoo.hf.plain",
    "normzoo.train",
    "normzoo.runlock",
    "normzoo.preemption",
    "normzoo.rng",
    "normzoo.machine",
    "normzoo.optim",
    "normzoo.diagnostics.sweep",
    "normzoo.diagnostics.launch",
    "normzoo.diagnostics.compare",
    "normzoo.diagnostics.grid",
    "normzoo.checkpoints.atomic",
    "normzoo.checkpoints.load",
    "normzoo.tasks.terms",
    "normzoo.run.rng",
    "normzoo.data.prepared",
    "normzoo.data.prepare_tokenizer",
    "normzoo.run.final_test",
    "normzoo.data.streaming",
]


@pytest.mark.parametrize("old", OLD_PATHS)
def test_an_old_import_path_simply_stops_importing(old: str):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


# Every built-in scheme's module and name (as pyproject.toml declares them); "post" and "pre"
# are also the two placements the exports map to, so the name check leaves those two words out.
SCHEME_MODULES = {p.stem for p in (ROOT / "residual").glob("*.py")} - {"__init__", "base"}
SCHEME_NAMES = declared("residual") - {"post", "pre"}


def test_no_module_outside_residual_imports_a_scheme_or_compares_its_name():
    """The contract (normzoo/residual/base.py) is all the rest of normzoo knows of a scheme, so a
    plugin can do whatever a built-in does: no import of a scheme's module, no ``== "admin"``."""
    found = []
    for name, path in MODULES.items():
        if name.startswith("normzoo.residual"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                scheme = node.module.removeprefix("normzoo.residual.")
                if node.module.startswith("normzoo.residual.") and scheme in SCHEME_MODULES:
                    found.append(f"{name} imports {node.module}")
                if node.module == "normzoo.residual":
                    found += [f"{name} imports {alias.name}" for alias in node.names
                              if alias.name in SCHEME_MODULES]
            if isinstance(node, ast.Compare):
                constants = [c.value for c in [node.left, *node.comparators]
                             if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                found += [f"{name} compares {value!r}" for value in constants
                          if value in SCHEME_NAMES]
    assert found == []


# Every built-in task's name and package: the rest of normzoo asks the task (the contract in
# normzoo/tasks/contract.py), as it asks a residual scheme.
TASK_NAMES = declared("task")
# normzoo's own tasks: translation and the language models in normzoo/tasks/, and the
# classifier, written against normzoo.plugin alone, as a package of its own.
TASK_DIRS = [p for p in [*(ROOT / "tasks").iterdir(), ROOT / "classification"]
             if (p / "task.py").is_file()]
TASK_PACKAGES = {p.name for p in TASK_DIRS}
TASK_MODULES = tuple(module_name(p / "__init__.py") for p in TASK_DIRS)
# The issue's own search: ``task == "..."``, ``task in (...)``, ``.task == ...``.
TASK_SWITCH = re.compile(r"""task ?[=!]= ?['"]|task (not )?in [\(\{\[]|\.task ?[=!]=""")


def _task_switches(name: str, source: str) -> list[str]:
    found = [f"{name}:{number}: {line.strip()}"
             for number, line in enumerate(source.splitlines(), start=1)
             if TASK_SWITCH.search(line)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            package = node.module.removeprefix("normzoo.tasks.").split(".")[0]
            if ((node.module.startswith("normzoo.tasks.") and package in TASK_PACKAGES)
                    or node.module.startswith(TASK_MODULES)):
                found.append(f"{name} imports {node.module}")
        if isinstance(node, ast.Compare):
            constants = [c.value for c in [node.left, *node.comparators]
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            found += [f"{name} compares {value!r}" for value in constants
                      if value in TASK_NAMES]
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if len(keys & TASK_NAMES) >= 2:
                found.append(f"{name} maps task names: {sorted(keys & TASK_NAMES)}")
    return found


def test_nothing_outside_tasks_names_a_task():
    """A task is one package under normzoo/tasks/ and one entry point: nothing else switches on
    its name, imports its modules or keys a table by it, so a third party's task does whatever a
    built-in does (issue 53)."""
    found = []
    for name, path in MODULES.items():
        if name.startswith(("normzoo.tasks", *TASK_MODULES)):
            continue
        found += _task_switches(name, path.read_text(encoding="utf-8"))
    assert found == []


def test_the_task_check_sees_the_switches_that_were_there():
    """The check finds each form the 20 switches of issue 53 took."""
    old = ('a = recipe.task == "translation"\n'
           'b = task not in ("causal_lm", "mlm")\n'
           'x = {"translation": 1, "mlm": 2}\n'
           'from normzoo.tasks.lm.module import MaskedLMModule\n'
           'c = "mlm" == kind\n')
    assert len(_task_switches("old", old)) == 6  # the first two lines are found both ways


def test_every_built_in_task_is_listed_and_registered():
    from normzoo import registry

    assert {"translation", "lm", "classification"} == TASK_PACKAGES
    assert set(registry.tasks.names()) >= TASK_NAMES
    result = subprocess.run([sys.executable, "-m", "normzoo", "list", "tasks"],
                            capture_output=True, text=True, check=True)
    assert [line.split()[0] for line in result.stdout.splitlines()[1:] if line.strip()] == \
        sorted(TASK_NAMES)


def test_imports_run_down_the_floors_that_the_architecture_page_states():
    """0 imports running back up: import-linter's layers contract (pyproject.toml) over every
    import, those inside functions included (type-only ones under TYPE_CHECKING are not
    dependencies), and its floors are the order docs/architecture.md states."""
    import tomllib

    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = config["tool"]["importlinter"]["contracts"]
    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    stated = re.search(r"From the top: (.+?)\.\s", page, re.S).group(1)
    floors = [" | ".join(re.findall(r"`(\w+)`", floor)) for floor in stated.split("→")]
    assert floors == contract["layers"]
    result = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_"
                             "command; lint_imports_command()"],
                            capture_output=True, text=True, cwd=ROOT.parent)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def _normzoo_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of ``folder``'s normzoo imports (module-level, in functions, type-only)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and node.level == 0 else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [])
            found.setdefault(path.name, set()).update(
                n for n in names if n == "normzoo" or n.startswith("normzoo."))
    return found


@pytest.mark.parametrize("folder", [
    ROOT / "classification",
    ROOT.parent / "plugins" / "normzoo-example-plugin" / "normzoo_example_plugin"],
    ids=["classification", "example-plugin"])
def test_a_plugin_imports_only_normzoo_plugin_and_its_own_package(folder: Path):
    """What a plugin needs is in normzoo.plugin (issue 59): the built-in classifier and the
    example plugin are written against it alone, so the rest of normzoo is private."""
    own = "normzoo.classification" if folder.name == "classification" else folder.name
    for module, names in _normzoo_imports(folder).items():
        outside = sorted(n for n in names if n != "normzoo.plugin" and n != own
                         and not n.startswith(own + "."))
        assert outside == [], f"{folder.name}/{module} imports {outside}"


def test_normzoo_plugin_names_every_part_it_documents():
    """Each public name resolves (the lazy ones too), and the contract part imports no torch."""
    import normzoo.plugin as plugin

    for name in plugin.__all__:
        assert getattr(plugin, name) is not None, name
    fresh = subprocess.run([sys.executable, "-c", "import sys, normzoo.plugin; "
                            "print('torch' in sys.modules, 'lightning' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert fresh.stdout.split() == ["False", "False"]
