// Head-dim rows of vec4s and the lanes that hold them, for the per-thread (CPU) layouts of
// attention.wgsl and attention_backward.wgsl. A workgroup is one SIMD vector of LANES lanes on lavapipe, every
// storage load issued lane by lane; when all lanes need the same row, lane i loads vec4s
// i, i + LANES, … and subgroup shuffles hand them to the others (without subgroups, or when
// the lanes' rows differ, every lane loads the whole row).
// The includer defines HD4 (vec4s per row) and `fn load(which: u32, i: u32) -> vec4<f32>`
// (element i of its buffer number `which`), binds `step`, and calls `enter` first.
// Rows are never passed by value to a function here: llvmpipe copies such an argument
// through memory, which made a dot-product helper's callers (the forward's scores) 9× slower.

const LANES = 8u;
// vec4s of a row that each lane loads for the others.
const SLOTS = (HD4 + LANES - 1u) / LANES;

alias Row = array<vec4<f32>, HD4>;

var<private> lane: u32;
var<private> shared_rows: bool;

// An entry point's lane builtins.
struct LaneIds {
    @builtin(local_invocation_index) index: u32,
#if SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_id: u32,
#endif
}

// Sets `lane` and `shared_rows` (rows are shared when the subgroup is the workgroup) and
// returns the lane's index in the workgroup.
fn enter(ids: LaneIds) -> u32 {
#if SUBGROUPS
    shared_rows = ids.sg_size == LANES;
    lane = ids.sg_id;
#endif
    return ids.index;
}

// Lane `index` of a workgroup of query tokens t0 .. t0 + LANES (t0 < step.n_tokens). Lanes
// past the last token repeat it (all lanes take part in the shuffles) and store nothing.
struct QueryLane {
    t: u32,
    live: bool,
    // Positions this lane's token sees, and the most any lane's sees.
    n_pos: u32,
    n_pos_all: u32,
    // The cache row of the token's sequence's position 0.
    first: u32,
    // The last position this lane loads: its own, or with shared rows, the workgroup's.
    last_pos: u32,
}

// Every lane walks the positions its farthest-seeing token sees (the same loop for every
// lane); lanes share K/V rows only when they all read one sequence (this clears
// `shared_rows` otherwise).
fn query_lane(t0: u32, index: u32) -> QueryLane {
    let t_last = min(t0 + LANES, step.n_tokens) - 1u;
    var a: QueryLane;
    a.t = min(t0 + index, t_last);
    a.live = t0 + index <= t_last;
    a.n_pos = step.tok[a.t].x + 1u;
    a.first = step.tok[a.t].y - step.tok[a.t].x;
    let first0 = step.tok[t0].y - step.tok[t0].x;
    var one_sequence = true;
    for (var j = t0; j <= t_last; j++) {
        a.n_pos_all = max(a.n_pos_all, step.tok[j].x + 1u);
        one_sequence = one_sequence && step.tok[j].y - step.tok[j].x == first0;
    }
    shared_rows = shared_rows && one_sequence;
    a.last_pos = select(a.n_pos, a.n_pos_all, shared_rows) - 1u;
    return a;
}

// A row from this lane's share of it (vec4s lane, lane + LANES, …).
fn spread(mine: array<vec4<f32>, SLOTS>) -> Row {
    var r: Row;
#if SUBGROUPS
    for (var i = 0u; i < HD4; i++) {
        r[i] = subgroupShuffle(mine[i / LANES], i % LANES);
    }
#endif
    return r;
}

// The row of buffer `which` at vec4 `base`: loaded once per workgroup when `shared_rows`.
fn load_row(which: u32, base: u32) -> Row {
    if shared_rows {
        var mine: array<vec4<f32>, SLOTS>;
        for (var j = 0u; j < SLOTS; j++) {
            mine[j] = load(which, base + min(j * LANES + lane, HD4 - 1u));
        }
        return spread(mine);
    }
    var r: Row;
    for (var i = 0u; i < HD4; i++) {
        r[i] = load(which, base + i);
    }
    return r;
}
