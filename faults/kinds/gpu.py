"""GPU fault kinds."""

from faults.base import FaultKind, Param

GPU_SELECTOR_DOC = ("which GPU: {holding_shard: N} | {node: NAME, index: N} | {uuid: GPU-...}")

GPU_ECC = FaultKind(
    name="gpu.ecc",
    summary="ECC errors on a GPU: single- or double-bit counts, an Xid, optional silent "
            "corruption of the weights it holds",
    module="faults.gpu",
    func="ecc_error",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "driver"},
    selector="gpu",
    params=(
        Param("kind", str, "single_bit or double_bit", default="double_bit",
              choices=("single_bit", "double_bit")),
        Param("count", int, "errors added to the volatile ECC counter", default=1,
              minimum=0, maximum=1_000_000),
        Param("xid", int, "Xid reported with the errors (48 = double-bit ECC)", default=None,
              choices=(48, 63, 64, 94, 95), nullable=True),
        Param("corrupt_weights", bool, "silently corrupt the weights held on the GPU",
              default=False),
    ),
    seen_through="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, "
                 "DCGM_FI_DEV_XID_ERRORS; wrong answers when weights are corrupted",
    tags=("gpu", "ecc", "xid", "hbm"),
)


KINDS: tuple[FaultKind, ...] = (GPU_ECC,)
