"""Build hook: compile the record codec (lib/headwater/protocol/records/_crecords.pyx) with Cython.

Runs for the editable install (``make deps``: the module is built in place, beside its .pyx) and
for wheels (``make wheel``, the image builds: the wheel then carries it and is tagged for this
Python and platform). Without a C compiler or Python's headers the build goes on without it and
says so: headwater.protocol.records.record falls back to its pure-Python codec, which is also the
reference the compiled one is tested against. HEADWATER_NO_EXTENSIONS=1 skips the build (and, at
run time, the use) of the compiled codec.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PYX = Path("lib/headwater/protocol/records/_crecords.pyx")


class CompiledCodecHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if os.environ.get("HEADWATER_NO_EXTENSIONS", "") not in ("", "0"):
            self._say("HEADWATER_NO_EXTENSIONS is set: the pure-Python record codec only")
            return
        root = Path(self.root)
        try:
            so = build_extension(root / PYX)
        except (OSError, subprocess.CalledProcessError, ImportError) as e:
            self._say(f"the compiled record codec was not built ({e}); the pure-Python codec is used")
            return
        if self.target_name == "wheel" and version != "editable":
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            # The wheel target maps lib/headwater -> headwater; artifacts are included even though
            # .gitignore lists built modules.
            build_data["artifacts"].append(str(so.relative_to(root)))

    def _say(self, msg: str) -> None:
        print(f"headwater build: {msg}", file=sys.stderr)


def build_extension(pyx: Path) -> Path:
    """Cythonize ``pyx`` and compile it beside itself; the built module's path. Skips the work
    when the module is newer than its source."""
    so = pyx.with_name(pyx.stem + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if so.exists() and so.stat().st_mtime >= pyx.stat().st_mtime:
        return so
    from Cython.Build import cythonize  # the build requirement (pyproject.toml)

    cythonize([str(pyx)], language_level=3, quiet=True, force=True)
    c_file = pyx.with_suffix(".c")
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    tmp = so.with_suffix(".tmp")
    subprocess.run(
        [*cc, "-shared", "-fPIC", "-O2", "-fno-strict-aliasing", "-I", include, str(c_file), "-o", str(tmp)],
        check=True,
    )
    os.replace(tmp, so)
    c_file.unlink(missing_ok=True)
    return so
