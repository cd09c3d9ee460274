// Workgroup reductions over 256 invocations, shared by the kernels that reduce a row in one
// workgroup (rms_norm, sample). The including kernel must run with @workgroup_size(256) and
// call these from uniform control flow. Each result is a uniform value (read with
// workgroupUniformLoad), so kernels may branch on it, and each ends with a barrier.

const WG: u32 = 256u;

var<workgroup> red_f: array<f32, 256>;
var<workgroup> red_u: array<u32, 256>;

// The sum of `value` over the workgroup.
fn wg_sum(lid: u32, value: f32) -> f32 {
    red_f[lid] = value;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        if (lid < half) {
            red_f[lid] = red_f[lid] + red_f[lid + half];
        }
        workgroupBarrier();
    }
    let total = workgroupUniformLoad(&red_f[0]);
    workgroupBarrier();
    return total;
}

// The largest `value` over the workgroup and the smallest index that holds it (an index of
// 0xffffffff loses to every other).
fn wg_argmax(lid: u32, value: f32, index: u32) -> vec2<u32> {
    red_f[lid] = value;
    red_u[lid] = index;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        if (lid < half) {
            let v = red_f[lid + half];
            let i = red_u[lid + half];
            if (v > red_f[lid] || (v == red_f[lid] && i < red_u[lid])) {
                red_f[lid] = v;
                red_u[lid] = i;
            }
        }
        workgroupBarrier();
    }
    let best = vec2<u32>(bitcast<u32>(workgroupUniformLoad(&red_f[0])), workgroupUniformLoad(&red_u[0]));
    workgroupBarrier();
    return best;
}

// The sum of `value` over the workgroup, as unsigned integers.
fn wg_sum_u(lid: u32, value: u32) -> u32 {
    red_u[lid] = value;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        if (lid < half) {
            red_u[lid] = red_u[lid] + red_u[lid + half];
        }
        workgroupBarrier();
    }
    let total = workgroupUniformLoad(&red_u[0]);
    workgroupBarrier();
    return total;
}
