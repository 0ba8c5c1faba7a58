"""The wheels ``benchmarks/gpu_check.sh`` carries against what the GPU image has and what the
check needs (``benchmarks/gpu_packages.py``): the project's dependencies and what the check's
files import, followed through their requirements. Issue 50's first call stopped in its first
step on a missing ``submitit``."""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_packages as packages


def test_every_package_the_check_needs_is_in_the_image_or_carried():
    assert packages.problems() == []


def test_what_the_check_imports_is_found_and_includes_the_peers():
    imported, unknown = packages.check_imports()
    names = {packages.normalise(r.name) for r in imported}
    assert unknown == []
    assert {"pytest", "x-transformers", "transformers", "torch"} <= names
    assert any(p.name == "test_gpu_schemes.py" for p in packages.gpu_marked_tests())


def test_a_missing_wheel_an_unneeded_one_and_an_unexplained_one_are_each_found():
    wheels = packages.script_wheels()
    assert "submitit" in wheels and "datasets" in wheels and "x-transformers" in wheels
    missing = packages.problems(wheels=[w for w in wheels if w != "submitit"])
    assert missing == ["submitit: needed by the check but neither in the image nor in WHEELS"]
    found = packages.problems(wheels=[*wheels, "lightning", "rich"])
    assert any(p.startswith("lightning: the image has it") for p in found)
    assert any(p == "rich: in WHEELS but nothing needs it" for p in found)
    # The one carried over the image's is explained in the script.
    assert "typing-extensions" in packages.explained_wheels()


def test_requirements_are_followed_with_markers_and_extras_for_python_3_12_on_linux():
    metadata = {
        "a": ["b[http]>=1", "c; python_version < '3.11'", "d; sys_platform == 'win32'",
              "e; extra == 'docs'"],
        "b": ["f; extra == 'http'", "g; extra == 'other'"],
        "f": [], "torch": ["nvidia-cublas"],
    }
    found = packages.closure([Requirement("a"), Requirement("torch")], stop={"torch"},
                             requires=metadata.get)
    assert found.packages == {"a", "b", "f", "torch"}  # not c, d, e, g; torch's not followed
    assert found.not_installed == set()
    unknown = packages.closure([Requirement("h")], requires=metadata.get)
    assert unknown.not_installed == {"h"}


def test_an_image_version_a_requirement_excludes_must_be_carried():
    image = {**packages.image_packages(), "huggingface-hub": Version("0.20.0")}
    found = packages.problems(image=image)
    assert any(p.startswith("huggingface-hub: the image has 0.20.0") for p in found)


def test_names_are_compared_normalised_and_the_image_list_says_where_it_comes_from():
    assert packages.normalise("Typing_Extensions") == "typing-extensions"
    assert packages.normalise("ruamel.yaml") == "ruamel-yaml"
    image = packages.image_packages()
    assert len(image) > 150 and image["torch"] == Version("2.11.0")
    assert "pydantic" not in image and "submitit" not in image  # what issue 50 met
    header = packages.IMAGE.read_text().splitlines()[:6]
    assert any("KINDS.md" in line for line in header)
    assert any("2026-11-17" in line for line in header)
