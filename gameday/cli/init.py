"""``gameday init``: a commented experiment to start from, one per kind of system.

Every template, written as it is, passes ``gameday validate``; its comments say what to
change (the URL, the process, the metrics) and which commands come next.
"""

import argparse
import json
import sys
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from gameday.cli.parsers import command
from gameday.errors import InvalidInput

DEFAULT = "lab"


@dataclass(frozen=True)
class Template:
    """One starting point: its file under ``gameday/cli/templates`` and the values its
    ``@@name@@`` markers take."""

    name: str
    summary: str
    file: str
    values: dict[str, str] = field(default_factory=dict)

    def render(self, path: Path) -> str:
        text = (files("gameday.cli") / "templates" / self.file).read_text(encoding="utf-8")
        for key, value in {**self.values, "path": str(path)}.items():
            text = text.replace(f"@@{key}@@", value)
        return text


def _v2(server: str, url: str, process: str, input_name: str, datatype: str,
        dtype: str) -> dict[str, str]:
    """The values of a model server that speaks the KServe v2 (Open Inference) protocol."""
    body = {"inputs": [{"name": input_name, "shape": [1, 4], "datatype": datatype,
                        "data": [0.1, 0.2, 0.3, 0.4]}]}
    request = {"inputs": [{"name": input_name, "shape": "$shape", "datatype": datatype,
                           "data": "$inputs_flat"}]}
    base = url.split("/v2/", 1)[0]
    return {"server": server, "protocol": "the KServe v2 (Open Inference) protocol",
            "url": url, "health": f"{base}/v2/health/ready", "process": process,
            "body": json.dumps(body), "request": json.dumps(request),
            "outputs": "outputs.0.data",
            "shape": "          outputs_shape: outputs.0.shape   # flat data, reshaped\n",
            "dtype": dtype}


TEMPLATES: dict[str, Template] = {t.name: t for t in (
    Template("lab", "the embedded lab: a GPU ECC error healed by re-sharding (no GPU "
                    "needed; the default)", "lab.yaml"),
    Template("kserve-v2", "an HTTP model server speaking KServe v2 (MLServer, KServe): "
                          "latency, prediction hash, RTO after a kill", "model-server.yaml",
             _v2("MLServer", "http://127.0.0.1:8080/v2/models/my-model/infer",
                 "mlserver start", "input-0", "FP64", "float64")),
    Template("triton", "an NVIDIA Triton Inference Server: latency, prediction hash, RTO "
                       "after a kill", "model-server.yaml",
             _v2("Triton", "http://127.0.0.1:8000/v2/models/my-model/infer", "tritonserver",
                 "INPUT0", "FP32", "float32")),
    Template("tf-serving", "a TensorFlow Serving REST endpoint: latency, prediction hash, "
                           "RTO after a kill", "model-server.yaml",
             {"server": "TensorFlow Serving", "protocol": "TensorFlow Serving's REST API",
              "url": "http://127.0.0.1:8501/v1/models/my-model:predict",
              "health": "http://127.0.0.1:8501/v1/models/my-model",
              "process": "tensorflow_model_server",
              "body": json.dumps({"instances": [[0.1, 0.2, 0.3, 0.4]]}),
              "request": json.dumps({"instances": "$inputs"}), "outputs": "predictions",
              "shape": "", "dtype": "float32"}),
    Template("training", "a training job: work lost to a crash within the checkpoint RPO",
             "training.yaml"),
    Template("kubernetes", "a Kubernetes workload: a killed pod replaced within the RTO",
             "kubernetes.yaml"),
)}


def add_command(commands: Any) -> None:
    """Add ``gameday init`` to the ``gameday`` parser's subparsers."""
    init = command(commands, "init", "write a commented experiment to start from",
                   "gameday init --list\ngameday init --template triton my-triton.yaml && "
                   "gameday validate my-triton.yaml")
    init.add_argument("path", type=Path, nargs="?", metavar="PATH",
                      help="the experiment file to write")
    init.add_argument("--template", "-t", choices=sorted(TEMPLATES), default=DEFAULT,
                      help=f"what it is about (default {DEFAULT}; --list describes them)")
    init.add_argument("--list", action="store_true", help="list the templates and exit")
    init.add_argument("--force", action="store_true", help="overwrite PATH if it exists")


def run_init(args: argparse.Namespace) -> int:
    """List the templates, or write one to ``args.path``; 0, or InvalidInput (exit 2)."""
    if args.list:
        width = max(len(name) for name in TEMPLATES)
        for template in TEMPLATES.values():
            print(f"{template.name.ljust(width)}  {template.summary}")
        return 0
    if args.path is None:
        raise InvalidInput("give the file to write, e.g. `gameday init my-first.yaml`",
                           path="PATH")
    path: Path = args.path
    if path.exists() and not args.force:
        raise InvalidInput("already exists; choose another name or add --force",
                           file=str(path))
    if path.is_dir():
        raise InvalidInput("is a directory; give a file name", file=str(path))
    from gameday.atomic import replace_file

    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, TEMPLATES[args.template].render(path).encode(), mode=0o644)
    print(f"wrote {path} ({args.template}); next: gameday validate {path} && "
          f"gameday run {path} --dry-run", file=sys.stdout)
    return 0
