"""Topology rules of the controller, as pure functions."""

from gameday.lab.placement import GpuSlot, choose_gpu, initial_placement


def cluster(nodes: int = 2, gpus: int = 4) -> list[GpuSlot]:
    return [GpuSlot(f"node-{n}", g, f"uuid-{n}-{g}", f"node-{n}", order=n * gpus + g)
            for n in range(nodes) for g in range(gpus)]


def test_initial_placement_fills_nodes_evenly_and_keeps_spares() -> None:
    assert initial_placement(["node-0", "node-1"], 4, 6) == [
        ("node-0", 0), ("node-0", 1), ("node-0", 2), ("node-1", 0), ("node-1", 1), ("node-1", 2)]
    assert initial_placement(["a", "b"], 4, 3) == [("a", 0), ("a", 1), ("b", 0)]
    assert initial_placement(["a"], 2, 2) == [("a", 0), ("a", 1)]


def test_a_move_prefers_a_free_gpu_in_the_same_nvlink_domain() -> None:
    gpus = cluster()
    load = {("node-0", 1): 1, ("node-0", 2): 1, ("node-1", 0): 1}
    chosen = choose_gpu(gpus, load, domain="node-0", avoid=("node-0", 0))
    assert chosen is not None and chosen.key == ("node-0", 3)


def test_then_a_free_gpu_elsewhere_then_the_least_loaded() -> None:
    gpus = cluster(2, 2)
    full = {("node-0", 1): 1}
    chosen = choose_gpu(gpus, full, domain="node-0", avoid=("node-0", 0))
    assert chosen is not None and chosen.key == ("node-1", 0)
    # No free GPU: stay in the NVLink domain, even on a busier GPU.
    busy = {("node-0", 1): 2, ("node-1", 0): 1, ("node-1", 1): 1}
    chosen = choose_gpu(gpus, busy, domain="node-0", avoid=("node-0", 0))
    assert chosen is not None and chosen.key == ("node-0", 1)
    busy = {("node-0", 0): 1, ("node-0", 1): 1, ("node-1", 0): 2, ("node-1", 1): 1}
    chosen = choose_gpu(gpus, busy, domain="node-1", avoid=("node-1", 1))
    assert chosen is not None and chosen.key == ("node-1", 0)
    gpus[0].state = gpus[1].state = "cordoned"
    chosen = choose_gpu(gpus, busy, domain="node-0", avoid=("node-0", 0))
    assert chosen is not None and chosen.key == ("node-1", 1)


def test_cordoned_gpus_are_never_chosen() -> None:
    gpus = cluster(1, 2)
    gpus[1].state = "cordoned"
    assert choose_gpu(gpus, {}, avoid=("node-0", 0)) is None
    chosen = choose_gpu(gpus, {}, prefer=("node-0", 1))
    assert chosen is not None and chosen.key == ("node-0", 0)
