"""PoolRoom packing against a brute-force model (gpupool.scheduler.capacity)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.scheduler import NodeView, PoolView
from gpupool.scheduler.capacity import PoolRoom, Shape


@pytest.mark.parametrize(
    ("small", "large", "want"),
    [
        pytest.param(Shape(1, 1, 0, 0), Shape(2, 1, 0, 0), True, id="more gpus"),
        pytest.param(Shape(1, 1, 0, 0), Shape(1, 1, 0, 0), True, id="equal"),
        pytest.param(Shape(2, 1, 0, 0), Shape(1, 2, 0, 0), False, id="fewer gpus, more nodes"),
        pytest.param(Shape(1, 1, 4, 0), Shape(1, 1, 2, 0), False, id="fewer cpus"),
    ],
)
def test_shape_covers(small: Shape, large: Shape, want: bool) -> None:
    assert small.covers(large) is want


nodes = st.lists(
    st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(1, 8)), min_size=1, max_size=6
)
shapes = st.builds(
    Shape, st.integers(0, 4), st.integers(1, 3), st.integers(0, 4).map(float), st.just(0.0)
)


@settings(max_examples=100, deadline=None)
@given(spec=nodes, requests=st.lists(shapes, max_size=12))
def test_pick_matches_brute_force(spec: list[tuple[int, int, int]], requests: list[Shape]) -> None:
    """Picks are the most allocated fitting nodes by name; takes keep devices and room exact."""
    views = []
    for i, (gpus, used, cpus) in enumerate(spec):
        used_devices = frozenset(range(0, min(used, gpus)))
        views.append(NodeView(f"n{5 - i}", gpus, float(cpus), 64.0, used_devices))
    room = PoolRoom(PoolView("p", "h100", "local", tuple(views)))
    free = {v.name: sorted(set(range(v.gpus)) - v.used_devices) for v in views}
    cpus = {v.name: v.cpus for v in views}
    for shape in requests:
        fitting = sorted(
            (len(free[n]), n) for n in free if len(free[n]) >= shape.gpus and cpus[n] >= shape.cpus
        )
        pick = room.pick(shape)
        if len(fitting) < shape.nodes:
            assert pick is None
            continue
        assert pick is not None
        placements = room.take(pick.nodes, shape)
        want = [n for _, n in fitting[: shape.nodes]]
        assert [p.node for p in placements] == want
        for placement in placements:
            assert list(placement.devices) == free[placement.node][: shape.gpus]
            free[placement.node] = free[placement.node][shape.gpus :]
            cpus[placement.node] -= shape.cpus
    assert room.max_free_gpus() == max((len(f) for f in free.values()), default=0)


@settings(max_examples=100, deadline=None)
@given(
    spec=st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 4)), min_size=1, max_size=6
    ),
    gpus=st.integers(0, 9),
    duplicate=st.booleans(),
)
def test_count_nodes_with_matches_brute_force(
    spec: list[tuple[int, int, int]], gpus: int, duplicate: bool
) -> None:
    """The bucket count plus the named nodes equals counting every node (duplicate names too)."""
    views = [
        NodeView(f"n{0 if duplicate and i < 2 else i}", g, 8.0, 64.0, frozenset(range(min(u, g))))
        for i, (g, u, _) in enumerate(spec)
    ]
    room = PoolRoom(PoolView("p", "h100", "local", tuple(views)))
    extra = {f"n{i}": more for i, (_, _, more) in enumerate(spec) if more}
    extra["missing"] = 3
    want = sum(1 for v in views if v.gpus - len(v.used_devices) + extra.get(v.name, 0) >= gpus)
    assert room.count_nodes_with(gpus, extra) == want
