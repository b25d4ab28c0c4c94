"""verifiers.prediction_hash against a real numpy model served over HTTP."""

import json
from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed

from gameday.engine.session import Session
from tests.verifiers.verifier_helpers import ModelServer, free_port
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
    with pytest.raises(ActivityFailed, match=r"no 'outputs' in the answer \(keys: ok\)"):
        matches_golden(f"{model.url}/healthz")
    assert [r.passed for r in session.results] == [False, False, False]


def test_unknown_golden_is_refused(session: Session, model: ModelServer) -> None:
    with pytest.raises(ActivityFailed) as caught:
        matches_golden(f"{model.url}/predict", golden="cpature")
    assert str(caught.value) == ("golden 'cpature' is neither 'capture', a sha256 hex digest "
                                 "nor an existing file")
    assert model.requests == []


# -- any HTTP JSON model endpoint: request templates and output selectors -----------------

V2_REQUEST = {"inputs": [{"name": "x", "shape": "$shape", "datatype": "FP64",
                          "data": "$inputs_flat"}]}


def test_tf_serving_and_kserve_v2_protocols_hash_like_the_native_one(
        session: Session, model: ModelServer) -> None:
    """The same model behind three protocols gives one digest."""
    native = verify_predictions(f"{model.url}/predict", rows=4)
    v1 = verify_predictions(f"{model.url}/v1/models/mlp:predict", rows=4,
                            request={"instances": "$inputs"}, outputs="predictions")
    v2 = verify_predictions(f"{model.url}/v2/models/mlp/infer", rows=4, request=V2_REQUEST,
                            outputs="outputs.0.data", outputs_shape="outputs.0.shape")
    assert native["digest"] == v1["digest"] == v2["digest"]
    assert v2["shape"] == [4, 8] and v2["request"] == V2_REQUEST
    model.corrupt = (9, 1e-3)
    with pytest.raises(ActivityFailed, match=r"first difference at output index 9, max abs "
                                             r"error 0\.001\)$"):
        verify_predictions(f"{model.url}/v2/models/mlp/infer", rows=4, request=V2_REQUEST,
                           outputs="outputs.0.data", outputs_shape="outputs.0.shape")


def test_float32_encoding_ignores_noise_below_float32_and_hashes_differently(
        session: Session, model: ModelServer) -> None:
    endpoint = f"{model.url}/predict"
    exact = verify_predictions(endpoint, rows=2)
    as32 = verify_predictions(endpoint, rows=2, dtype="float32")
    assert as32["digest"] != exact["digest"]  # the dtype is in the digest
    model.noise = 1e-12  # far below float32 resolution at these magnitudes
    assert verify_predictions(endpoint, rows=2, dtype="float32")["matched"] is True
    with pytest.raises(ActivityFailed, match="prediction hash mismatch"):
        verify_predictions(endpoint, rows=2)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"request": {"instances": "$input"}}, "request template: unknown placeholder '$input'"),
    ({"request": {"instances": [1, 2]}}, 'request template has no "$inputs"'),
    ({"outputs": "predictions.0"}, "output selector 'predictions.0': no 'predictions' in the "
                                   "answer (keys: outputs)"),
    ({"outputs": "outputs", "outputs_shape": "$"}, "do not fit shape"),
    ({"dtype": "int8"}, "dtype must be one of float64, float32, float16"),
])
def test_bad_templates_and_selectors_fail_in_one_line(
        session: Session, model: ModelServer, arguments: dict[str, object],
        message: str) -> None:
    with pytest.raises(ActivityFailed) as caught:
        verify_predictions(f"{model.url}/predict", rows=2, **arguments)  # type: ignore[arg-type]
    assert message in str(caught.value) and "\n" not in str(caught.value)
