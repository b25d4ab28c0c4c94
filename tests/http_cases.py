"""Random HTTP/1.1 messages for the differential tests of both ends' framing against
h11 (tests/security/test_framing.py, tests/wire/test_http1.py): a good message with a few
pieces cut out or put in, or pieces of HTTP strung together."""

import random


def http_case(rng: random.Random, base: bytes, pieces: list[bytes], *,
              mutated: float = 0.5, longest: int = 14) -> bytes:
    """``base`` with one to four cuts or insertions of ``pieces`` (with probability
    ``mutated``), else three to ``longest`` of ``pieces`` strung together."""
    if rng.random() >= mutated:
        return b"".join(rng.choice(pieces) for _ in range(rng.randint(3, longest)))
    data = bytearray(base)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        if rng.random() < 0.5 and len(data) > at:
            del data[at:at + rng.randint(1, 3)]
        else:
            data[at:at] = rng.choice(pieces)
    return bytes(data)
