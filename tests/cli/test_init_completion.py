"""``gameday init`` and ``gameday completion``, through the real CLI: every template as
written passes ``gameday validate``; the bash script is sourced into a real bash and its
completion function asked, as bash's programmable completion asks it (no zsh here: the
zsh script is checked to wrap the same function with zsh's bashcompinit)."""

import subprocess
from pathlib import Path

import pytest

from gameday.cli.init import TEMPLATES
from tests.conftest import BIN, cli_env, gameday, gameday_main


def test_list_names_every_template_and_the_default(tmp_path: Path) -> None:
    result = gameday_main(["init", "--list"], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines()]
    assert listed == list(TEMPLATES)
    assert {"lab", "kserve-v2", "triton", "tf-serving", "training", "kubernetes"} <= set(listed)
    assert "the default" in result.stdout.splitlines()[0]


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_every_template_validates_as_written(tmp_path: Path, template: str) -> None:
    env = cli_env(tmp_path)
    path = tmp_path / "mine" / f"{template}.yaml"
    written = gameday_main(["init", "--template", template, str(path)], env)
    assert written.returncode == 0, written.stderr
    assert f"gameday validate {path}" in written.stdout
    text = path.read_text()
    assert text.startswith("# ") and "@@" not in text
    assert f"gameday run {path} --dry-run" in text  # the next steps, in the file
    result = gameday_main(["validate", str(path)], env)
    assert (result.returncode, result.stdout) == (0, f"{path}: experiment: valid\n"), result.stderr


def test_the_default_is_the_lab_flagship_and_nothing_is_overwritten(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    path = tmp_path / "first.yaml"
    assert gameday_main(["init", str(path)], env).returncode == 0
    assert "target: lab" in path.read_text() and "faults.gpu" in path.read_text()
    path.write_text("mine\n")
    again = gameday_main(["init", "--template", "triton", str(path)], env)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert path.read_text() == "mine\n"
    assert gameday_main(["init", "--force", "-t", "triton", str(path)], env).returncode == 0
    assert "tritonserver" in path.read_text()
    assert gameday_main(["init"], env).returncode == 2


def _complete(script: Path, *words: str) -> list[str]:
    """What bash offers for the command line ``words`` (the last one being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (f"source {script}\nCOMP_WORDS=({line})\nCOMP_CWORD={len(words) - 1}\n"
               f"complete -p gameday >&2\n_gameday\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], text=True,
                          capture_output=True, timeout=60, cwd=script.parent)
    assert done.returncode == 0, done.stderr
    assert "-F _gameday gameday" in done.stderr
    return [w for w in done.stdout.splitlines() if w]


def test_bash_completion_offers_commands_options_and_choices(tmp_path: Path) -> None:
    script = tmp_path / "gameday.bash"
    result = gameday(["completion", "bash"], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    script.write_text(result.stdout)
    assert {"run", "init", "validate", "faults", "lab", "completion"} <= set(
        _complete(script, "gameday", ""))
    assert _complete(script, "gameday", "la") == ["lab"]
    assert _complete(script, "gameday", "lab", "") == ["up", "status", "down"]
    assert set(_complete(script, "gameday", "lab", "status", "--")) >= {"--output", "--dir"}
    assert set(_complete(script, "gameday", "run", "x.yaml", "--target", "")) >= {
        "lab", "host", "kubernetes"}
    assert _complete(script, "gameday", "init", "--template", "tr") == ["training", "triton"]
    assert _complete(script, "gameday", "audit", "verify", "--output", "j") == ["json"]
    (tmp_path / "exp-one.yaml").write_text("")
    assert _complete(script, "gameday", "validate", "exp-") == ["exp-one.yaml"]
    assert _complete(script, "gameday", "faults", "gpu.e") == ["gpu.ecc"]
    assert "net.link_flap" in _complete(script, "gameday", "faults", "")


def test_bash_completion_registers_for_the_command_the_readme_types(tmp_path: Path) -> None:
    """The README runs ``.venv/bin/gameday``: bash completes by the word as typed, so the
    script registers that word too, and the program's own path."""
    script = tmp_path / "gameday.bash"
    script.write_text(gameday(["completion", "bash"], cli_env(tmp_path)).stdout)
    program = (f"source {script}\ncomplete -p .venv/bin/gameday\n"
               f"complete -p {BIN / 'gameday'}\n")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("-F _gameday") == 2, done.stdout


def test_zsh_completion_wraps_the_same_function(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    zsh = gameday(["completion", "zsh"], env).stdout
    bash = gameday(["completion", "bash"], env).stdout
    assert zsh.startswith("#compdef gameday\n") and "bashcompinit" in zsh and bash in zsh
    assert subprocess.run(["bash", "-n"], input=bash, text=True, timeout=30).returncode == 0
    assert gameday(["completion", "fish"], env).returncode == 2
