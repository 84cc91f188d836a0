"""Generate the Python gRPC stubs from proto/ into src/tidelog/v1 (or another output root).

python scripts/gen_proto.py            # regenerate the committed stubs
python scripts/gen_proto.py OUT_DIR    # generate elsewhere (the staleness test does this)
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"


def generate(output_root: Path) -> list[Path]:
    sources = sorted(PROTO_ROOT.glob("tidelog/v1/*.proto"))
    output_root.mkdir(parents=True, exist_ok=True)
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={output_root}",
            f"--pyi_out={output_root}",
            f"--grpc_python_out={output_root}",
            *(str(source) for source in sources),
        ]
    )
    if status != 0:
        raise SystemExit(f"protoc failed with status {status}")
    package = output_root / "tidelog" / "v1"
    (package / "__init__.py").write_text('"""Generated gRPC stubs (scripts/gen_proto.py); do not edit."""\n')
    return sorted(package.iterdir())


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "src")
