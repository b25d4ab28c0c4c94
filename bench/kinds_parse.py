"""What parsing a fault's parameters with its kind's declaration costs, next to decoding
the request's JSON body, for every agent-side kind with its defaults and with every
parameter given.

Last line: ``kinds_parse: parse_us=… json_us=… ratio=…`` (medians over the kinds; the
ratio is parse time over JSON decode time of the same request body). It is why the
declarations are plain frozen dataclasses and not a validation library: the parse is of
the order of the decode the agent does anyway.
"""

import argparse
import json
import statistics
import timeit

from gameday.kinds import CATALOGUE, KindParams, KindSpec

#: What the kinds with a rule across parameters need on top of their defaults.
RULED: dict[str, dict[str, object]] = {"gpu.oom": {"fraction": 0.5},
                                       "gpu.memory_leak": {"rate_fraction_per_s": 0.01}}


def _full(kind: KindSpec[KindParams]) -> dict[str, object]:
    """Every parameter given (its default, or the least value a required one allows)."""
    values: dict[str, object] = dict(RULED.get(kind.name, {}))
    for param in kind.params:
        if param.required:
            values[param.name] = param.minimum if param.minimum is not None else "x"
        elif param.default is not None:
            values.setdefault(param.name, param.default)
    values = kind.parse(values).to_json()
    return values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    parse_us, json_us = [], []
    for name, kind in CATALOGUE.items():
        if name.startswith("k8s."):
            continue
        params = _full(kind)
        body = json.dumps({"kind": name, "target": {"gpu": 0}, "params": params,
                           "lease_s": 30})
        parse = timeit.timeit(lambda k=kind, p=params: k.parse(p), number=args.number)
        decode = timeit.timeit(lambda b=body: json.loads(b), number=args.number)
        parse_us.append(parse / args.number * 1e6)
        json_us.append(decode / args.number * 1e6)
        print(f"{name:<18} parse {parse_us[-1]:6.2f} us   json {json_us[-1]:6.2f} us")
    p, j = statistics.median(parse_us), statistics.median(json_us)
    print(f"kinds_parse: parse_us={p:.2f} json_us={j:.2f} ratio={p / j:.2f}")


if __name__ == "__main__":
    main()
