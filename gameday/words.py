"""Counts in words, as every line for people writes them: ``1 probe``, ``2 probes``."""


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word``, in the plural (``many``, else ``word`` + ``s``) unless
    ``count`` is 1."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
