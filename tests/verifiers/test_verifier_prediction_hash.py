"""verifiers.prediction_hash against a real numpy model served over HTTP."""

import json
from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed
from verifier_helpers import ModelServer, free_port

from gameday.session import Session
from verifiers.canonical import digest
from verifiers.inputs import golden_inputs
from verifiers.prediction_hash import matches_golden, save_golden, verify_predictions


def test_capture_then_match(session: Session, model: ModelServer) -> None:
    endpoint = f"{model.url}/predict"
    assert matches_golden(endpoint) is True
    assert matches_golden(endpoint) is True
    captured, compared = session.results
    assert captured.passed is None and captured.measurement["captured"] is True
    assert captured.reason.startswith("captured golden sha256 ")
    assert compared.passed is True and compared.measurement["golden_source"] == "captured"
    expected = digest(model.model(golden_inputs(32, 16)))
    assert compared.measurement["digest"] == expected
    [stored] = session.golden.values()
    assert stored["digest"] == expected and len(stored["outputs"]) == 32
    assert model.requests == [("POST", 32), ("POST", 32)]


def test_corrupted_output_names_index_and_error(session: Session, model: ModelServer) -> None:
    endpoint = f"{model.url}/predict"
    matches_golden(endpoint)
    model.corrupt = (17, 0.83)
    with pytest.raises(ActivityFailed) as caught:
        matches_golden(endpoint)
    good = digest(model.model(golden_inputs()))
    corrupt = session.results[-1].measurement["digest"]
    assert str(caught.value) == (f"prediction hash mismatch: sha256 {corrupt[:12]}… != golden "
                                 f"{good[:12]}… (first difference at output index 17, max abs "
                                 f"error 0.83)")
    result = session.results[-1]
    assert result.passed is False and result.measurement["first_difference"] == 17
    assert result.measurement["max_abs_error"] == pytest.approx(0.83)


def test_rounding_tolerates_noise_and_keys_by_inputs(session: Session,
                                                     model: ModelServer) -> None:
    endpoint = f"{model.url}/predict"
    matches_golden(endpoint, rows=4)
    matches_golden(endpoint, rows=8)  # another input set: captured separately
    assert len(session.golden) == 2
    model.noise = 1e-12
    assert matches_golden(endpoint, rows=4, decimals=6)
    with pytest.raises(ActivityFailed, match=r"max abs error 1e-12\)$"):
        matches_golden(endpoint, rows=4)


def test_golden_digest_given_literally(session: Session, model: ModelServer) -> None:
    endpoint = f"{model.url}/predict"
    good = digest(model.model(golden_inputs(32, 16, seed=3)))
    assert matches_golden(endpoint, golden=good.upper(), seed=3)
    with pytest.raises(ActivityFailed) as caught:
        matches_golden(endpoint, golden="0" * 64, seed=3)
    assert str(caught.value) == (f"prediction hash mismatch: sha256 {good[:12]}… != golden "
                                 f"000000000000… (no golden outputs to locate the difference)")


def test_golden_file_from_save_golden(session: Session, model: ModelServer,
                                      tmp_path: Path) -> None:
    endpoint = f"{model.url}/predict"
    path = str(tmp_path / "golden" / "model.json")
    saved = save_golden(endpoint, path, rows=8)
    assert saved["digest"] == json.loads(Path(path).read_text())["digest"]
    measurement = verify_predictions(endpoint, golden=path, rows=8)
    assert measurement["matched"] is True and measurement["golden_source"] == f"file {path}"
    model.corrupt = (3, -2.0)
    with pytest.raises(ActivityFailed, match=r"first difference at output index 3, max abs "
                                              r"error 2\)$"):
        verify_predictions(endpoint, golden=path, rows=8)
    digest_only = tmp_path / "digest.json"
    digest_only.write_text(json.dumps({"digest": saved["digest"], "decimals": None}))
    model.corrupt = None
    assert matches_golden(endpoint, golden=str(digest_only), rows=8)
    with pytest.raises(ActivityFailed, match="taken with decimals=None, this probe uses "
                                             "decimals=3"):
        matches_golden(endpoint, golden=str(digest_only), rows=8, decimals=3)


def test_inputs_file_is_sent(session: Session, model: ModelServer, tmp_path: Path) -> None:
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"inputs": [[0.25] * 16] * 3}))
    measurement = verify_predictions(f"{model.url}/predict", inputs_file=str(path))
    assert measurement["rows"] == 3 and measurement["shape"] == [3, 8]
    assert model.requests == [("POST", 3)]


def test_shape_change_is_reported(session: Session, model: ModelServer,
                                  tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({"outputs": [[0.0] * 4] * 32}))
    with pytest.raises(ActivityFailed, match=r"\(output shape \(32, 8\) != golden \(32, 4\)\)$"):
        matches_golden(f"{model.url}/predict", golden=str(path))


def test_endpoint_errors_fail_in_one_line(session: Session, model: ModelServer) -> None:
    model.broken = True
    with pytest.raises(ActivityFailed) as caught:
        matches_golden(f"{model.url}/predict")
    assert str(caught.value) == f"POST {model.url}/predict answered 503: shard 0 broken"
    assert session.golden == {}  # nothing captured from a broken endpoint
    url = f"http://127.0.0.1:{free_port()}/predict"
    with pytest.raises(ActivityFailed, match=f"^POST {url} failed: .*refused"):
        matches_golden(url)
    with pytest.raises(ActivityFailed, match="without an \"outputs\" list"):
        matches_golden(f"{model.url}/healthz")
    assert [r.passed for r in session.results] == [False, False, False]


def test_unknown_golden_is_refused(session: Session, model: ModelServer) -> None:
    with pytest.raises(ActivityFailed) as caught:
        matches_golden(f"{model.url}/predict", golden="cpature")
    assert str(caught.value) == ("golden 'cpature' is neither 'capture', a sha256 hex digest "
                                 "nor an existing file")
    assert model.requests == []
