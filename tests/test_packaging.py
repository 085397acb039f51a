"""The wheel users install (not the editable checkout the tests run): every module, the marker files, the metadata."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import dynsource

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (built,) = out.glob("dynsource-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_every_module_of_the_package_and_py_typed(wheel):
    shipped = set(wheel.namelist())
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "dynsource").rglob("*.py")}
    assert modules - shipped == set()
    assert "dynsource/filtering/data.py" in modules and "dynsource/py.typed" in shipped


def test_the_wheel_metadata_names_the_license_version_and_bounded_pyspark(wheel):
    (metadata_name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(wheel.read(metadata_name).decode())
    assert metadata["Version"] == dynsource.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert any(name.endswith("licenses/LICENSE") for name in wheel.namelist())
    (pyspark,) = [r for r in metadata.get_all("Requires-Dist") if r.startswith("pyspark") and "extra" not in r]
    assert pyspark.replace(" ", "") == "pyspark<4.4,>=4.0"


# What Spark's Python workers load: the layers under spark/, and of spark/ what reads and writes.
WORKER_LAYERS = ("dynsource.runtime", "dynsource.filtering", "dynsource.layout", "dynsource.scan")
WORKER_SPARK = {"dynsource.spark", "dynsource.spark.source", "dynsource.spark.tablesource", "dynsource.spark.writer",
                "dynsource.spark.writeplan", "dynsource.spark.dynamicfiltering"}
ROOT_MODULES = {"dynsource", *(f"dynsource.{path.stem}" for path in (ROOT / "dynsource").glob("*.py"))} - {
    "dynsource.__init__", "dynsource.cli", "dynsource.demo", "dynsource.explain"}


def test_every_public_name_resolves_and_a_worker_loads_only_the_layers_below_the_automatic_planner():
    assert all(getattr(dynsource, name) is not None for name in dynsource.__all__)
    assert callable(dynsource.sql) and dynsource.sql.__module__ == "dynsource.dpp.query"
    loaded = subprocess.run(  # a worker unpickling a registered table's source, planning and writing
        [sys.executable, "-c", "import sys, dynsource.spark.tablesource; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=Path(dynsource.__file__).parents[1],
    ).stdout.split()
    ours = {name for name in loaded if name == "dynsource" or name.startswith("dynsource.")}
    unexpected = {name for name in ours if name not in ROOT_MODULES | WORKER_SPARK
                  and not name.startswith(WORKER_LAYERS)}
    assert not unexpected and "dynsource.spark.source" in ours
    assert {"dynsource.filtering.collector", "dynsource.filtering.handles"}.isdisjoint(ours)


def test_a_layer_imports_only_the_layers_below_it():
    """root < runtime < filtering < layout < scan < spark < dpp < explain, cli, demo, __init__ (function-level imports
    too)."""
    import ast

    order = ["root", "runtime", "filtering", "layout", "scan", "spark", "dpp", "top"]

    def layer(module: str) -> str:
        parts = module.split(".")
        if len(parts) > 2 or (len(parts) == 2 and parts[1] in order):
            return parts[1]
        return "top" if parts[-1] in ("explain", "cli", "demo", "dynsource") else "root"

    wrong = []
    for path in (ROOT / "dynsource").rglob("*.py"):
        module = ".".join(("dynsource", *path.relative_to(ROOT / "dynsource").with_suffix("").parts))
        module = module.removesuffix(".__init__") if path.name == "__init__.py" else module
        here = "top" if path == ROOT / "dynsource" / "__init__.py" else layer(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dynsource"):
                targets = [node.module] if node.module != "dynsource" else [f"dynsource.{a.name}" for a in node.names]
                wrong += [(module, target) for target in targets if order.index(layer(target)) > order.index(here)]
    assert not wrong
