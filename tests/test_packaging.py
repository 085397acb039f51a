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


def test_every_public_name_resolves_and_a_worker_unpickling_the_source_loads_no_driver_module():
    assert all(getattr(dynsource, name) is not None for name in dynsource.__all__)
    assert callable(dynsource.sql) and dynsource.sql.__module__ == "dynsource.query"
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, dynsource.source; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=Path(dynsource.__file__).parents[1],
    ).stdout.split()
    driver_only = {"dynsource.query", "dynsource.autodpp", "dynsource.starjoin", "dynsource.collector",
                   "dynsource.catalog", "dynsource.join", "dynsource.dimensions", "dynsource.handles"}
    assert driver_only.isdisjoint(loaded) and "dynsource.source" in loaded
