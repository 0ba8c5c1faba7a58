"""The model families are asked, not named (issue 59, item 4): outside :mod:`normzoo.models`
no module switches on a family's name (``family == "decoder"``, ``family in (...)``, a table
keyed by the names, a ``match`` on them, or the same with ``Family.DECODER``); it reads the
family's :class:`~normzoo.models.family_info.FamilyInfo` instead. And the names are written
out once, by :class:`normzoo.residual.base.Family`, which every other list derives from.

``normzoo/residual/`` is left out of the first check: the plugin API hands a scheme its
stack's ``Family`` so that its constants can depend on it (DeepNorm's and Sub-LN's do, per
family, as in their papers). ``"encoder"`` and ``"decoder"`` also name the two stacks, so
those two count as a family's name only beside something called ``family``; ``"encoder_decoder"``
and ``Family.X`` always do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import normzoo
from normzoo.residual.base import Family

ROOT = Path(normzoo.__file__).parent
FAMILY_NAMES = {member.value for member in Family}
STACK_NAMES = {"encoder", "decoder"}  # a stack's name as well as a family's
DEFINING = "residual/base.py"  # where Family names the families
ASKED = ("models/", "residual/")  # where a family may be switched on (see the docstring)


def _is_member(node: ast.AST) -> bool:
    """``Family.DECODER`` (or ``base.Family.DECODER``)."""
    if not (isinstance(node, ast.Attribute) and node.attr in Family.__members__):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "Family") or (
        isinstance(owner, ast.Attribute) and owner.attr == "Family")


def _names_a_family(node: ast.AST | None, beside_family: bool) -> bool:
    """Whether ``node`` is a family's name or member; a stack's name counts only
    ``beside_family``. A tuple (a membership test's, or a table's key) counts by its items."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_family(item, beside_family) for item in node.elts)
    if _is_member(node):
        return True
    if isinstance(node, ast.Constant) and node.value in FAMILY_NAMES:
        return node.value not in STACK_NAMES or beside_family
    return False


def _mentions_family(node: ast.AST) -> bool:
    return "family" in ast.unparse(node).lower()


def _switches(node: ast.AST) -> list[ast.AST]:
    """The parts of ``node`` that switch on a family's name: the node, or a ``match``'s
    cases."""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        return [node] if any(
            _names_a_family(operand, any(_mentions_family(other) for other in operands
                                         if other is not operand))
            for operand in operands) else []
    if isinstance(node, ast.Match):
        beside = _mentions_family(node.subject)
        return [case.pattern for case in node.cases
                if any(_names_a_family(p.value, beside) for p in ast.walk(case.pattern)
                       if isinstance(p, ast.MatchValue))]
    if isinstance(node, ast.Dict):  # a table keyed by family
        return [node] if any(_names_a_family(key, False) for key in node.keys) else []
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
        beside = _mentions_family(node.slice)  # {"decoder": ...}[config.family]
        return [node] if any(_names_a_family(key, beside) for key in node.value.keys) else []
    return []


def family_switches(source: str, name: str) -> list[str]:
    """Each line of ``source`` (module ``name``) that switches on a family's name."""
    found = {part.lineno: f"{name}:{part.lineno}: {ast.unparse(part)[:80]}"
             for node in ast.walk(ast.parse(source)) for part in _switches(node)}
    return [found[line] for line in sorted(found)]


def _modules(root: Path) -> dict[str, Path]:
    return {path.relative_to(root).as_posix(): path for path in sorted(root.rglob("*.py"))}


def switches_outside_models(root: Path) -> list[str]:
    """Every family switch in the modules under ``root`` outside ``models/`` and ``residual/``."""
    return [line for name, path in _modules(root).items() if not name.startswith(ASKED)
            for line in family_switches(path.read_text(encoding="utf-8"), name)]


def _spelled(source: str) -> set[str]:
    """The family names ``source`` writes as string literals, less a task's declaration of the
    one family it trains (``family = "decoder"`` in a class body: a task module is plain data,
    read without torch, so it names its family rather than import the enum)."""
    tree = ast.parse(source)
    declared = {id(statement.value) for klass in ast.walk(tree) if isinstance(klass, ast.ClassDef)
                for statement in klass.body if isinstance(statement, ast.Assign)
                and [ast.unparse(target) for target in statement.targets] == ["family"]}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and node.value in FAMILY_NAMES and id(node) not in declared}


def modules_spelling_the_families(root: Path) -> list[str]:
    """The modules under ``root`` that write the family list out: every family's name, or
    ``"encoder_decoder"``, the one no stack shares, as a string literal."""
    only_families = FAMILY_NAMES - STACK_NAMES
    return [name for name, path in _modules(root).items()
            if (spelled := _spelled(path.read_text(encoding="utf-8"))) >= FAMILY_NAMES
            or spelled & only_families]


def test_no_module_outside_models_switches_on_a_family_s_name():
    assert switches_outside_models(ROOT) == []


def test_the_family_names_are_written_once():
    assert modules_spelling_the_families(ROOT) == [DEFINING]


def test_every_family_is_described_and_the_recipe_offers_each():
    from normzoo.models.config import ModelConfig
    from normzoo.models.family_info import FAMILY_INFO
    from normzoo.recipe.rules import FAMILY_NAMES as RULES_NAMES

    assert set(FAMILY_INFO) == set(Family)
    assert set(RULES_NAMES) == FAMILY_NAMES
    for name in FAMILY_NAMES:
        assert ModelConfig(family=name).family_info.family is Family(name)


def test_nothing_outside_residual_compares_a_placement_that_is_also_a_scheme_s_name():
    """``"pre"`` and ``"post"`` name two schemes as well as the two plain placements: whether
    a connection is Pre-LN's is its :class:`~normzoo.residual.base.PlainForm`'s answer
    (``pre_norm_problem``), so no module outside ``residual/`` compares either word."""
    found = [f"{name}:{node.lineno}: {ast.unparse(node)}"
             for name, path in _modules(ROOT).items() if not name.startswith("residual/")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Compare) and any(
                 isinstance(item, ast.Constant) and item.value in ("pre", "post")
                 for operand in [node.left, *node.comparators]
                 for item in (operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set))
                              else [operand]))]
    assert found == []


PLANTED = '''
from normzoo.residual import Family


def pick(config, family, stack, table):
    a = config.family == "decoder"  # switch
    b = family in ("encoder", "encoder_decoder")  # switch
    c = "encoder_decoder" != family  # switch
    d = config.family is Family.ENCODER  # switch
    e = {"encoder_decoder": 1, "decoder": 2}[config.family]  # switch
    f = {"decoder": 1, "encoder": 2}[config.family]  # switch
    g = table[("encoder_decoder", "post")] if {("encoder_decoder", "post"): 1} else 0  # switch
    match config.family:
        case "encoder":  # switch
            pass
        case Family.DECODER:  # switch
            pass
    h = stack == "decoder"  # a stack's name, beside no family: no switch
    return config.family_info.cross_attention  # asking the family: no switch
'''


def test_the_switch_check_catches_a_planted_switch(tmp_path: Path):
    """Not vacuous: each form a switch took before is found, in a module of any package but
    ``models/`` (and ``residual/``), and a stack's name or a question to the family is not."""
    for folder in ("export/hf", "run", "models", "residual"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "planted.py").write_text(PLANTED, encoding="utf-8")
    found = switches_outside_models(tmp_path)
    expected = [number for number, line in enumerate(PLANTED.splitlines(), start=1)
                if line.endswith("# switch")]
    assert len(expected) == 9
    assert [int(line.split(":")[1]) for line in found] == expected * 2
    assert {line.split(":")[0] for line in found} == {"export/hf/planted.py", "run/planted.py"}


def test_the_spelling_check_catches_a_second_family_list(tmp_path: Path):
    (tmp_path / "residual").mkdir()
    (tmp_path / "residual" / "base.py").write_text(
        (ROOT / DEFINING).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "task.py").write_text('class T:\n    family = "encoder_decoder"\n',
                                      encoding="utf-8")
    (tmp_path / "stacks.py").write_text('STACKS = ("encoder", "decoder")\n', encoding="utf-8")
    assert modules_spelling_the_families(tmp_path) == [DEFINING]
    (tmp_path / "rules.py").write_text('FAMILIES = ("encoder_decoder", "encoder")\n',
                                       encoding="utf-8")
    (tmp_path / "card.py").write_text('TITLES = {"encoder": 1, "decoder": 2}\n'
                                      'WIDE = "encoder_decoder".upper()\n', encoding="utf-8")
    assert modules_spelling_the_families(tmp_path) == ["card.py", DEFINING, "rules.py"]
