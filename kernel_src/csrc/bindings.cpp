// nanobind module fp4_kernels._C. Tensors arrive through DLPack (nb::ndarray), so the
// extension never links against torch. Outputs are allocated by the Python layer.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fp4_api.h"

namespace nb = nanobind;
using Arr = nb::ndarray<nb::c_contig>;

#ifndef FP4_CUDA_ARCHS
#define FP4_CUDA_ARCHS ""
#endif
#ifndef FP4_NVCC_VERSION
#define FP4_NVCC_VERSION ""
#endif

namespace {

constexpr int kCPU = 1;   // kDLCPU
constexpr int kCUDA = 2;  // kDLCUDA

[[noreturn]] void fail(const std::string& msg) { throw nb::value_error(msg.c_str()); }

std::string shape_str(const Arr& a) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
    os << "]";
    return os.str();
}

fp4::DType float_dtype(const Arr& a, const char* name) {
    const auto d = a.dtype();
    if (d.lanes == 1 && d.code == (uint8_t)nb::dlpack::dtype_code::Float && d.bits == 32)
        return fp4::DType::F32;
    if (d.lanes == 1 && d.code == (uint8_t)nb::dlpack::dtype_code::Float && d.bits == 16)
        return fp4::DType::F16;
    if (d.lanes == 1 && d.code == (uint8_t)nb::dlpack::dtype_code::Bfloat && d.bits == 16)
        return fp4::DType::BF16;
    fail(std::string(name) + ": dtype must be float32, float16 or bfloat16");
}

void expect_u8(const Arr& a, const char* name) {
    const auto d = a.dtype();
    if (!(d.lanes == 1 && d.bits == 8 &&
          (d.code == (uint8_t)nb::dlpack::dtype_code::UInt ||
           d.code == (uint8_t)nb::dlpack::dtype_code::Int)))
        fail(std::string(name) + ": expected a uint8 tensor");
}

void expect_f32(const Arr& a, const char* name) {
    const auto d = a.dtype();
    if (!(d.lanes == 1 && d.bits == 32 && d.code == (uint8_t)nb::dlpack::dtype_code::Float))
        fail(std::string(name) + ": expected a float32 tensor");
}

void expect_shape(const Arr& a, const char* name, int64_t r, int64_t c) {
    if (a.ndim() != 2 || (int64_t)a.shape(0) != r || (int64_t)a.shape(1) != c) {
        std::ostringstream os;
        os << name << ": expected shape [" << r << ", " << c << "], got " << shape_str(a);
        fail(os.str());
    }
}

// Every tensor must live on the same device as the first; returns (is_cuda, device id).
std::pair<bool, int> same_device(std::initializer_list<std::pair<const Arr*, const char*>> as) {
    const Arr& first = *as.begin()->first;
    for (auto& p : as) {
        const Arr& a = *p.first;
        if (a.device_type() != kCPU && a.device_type() != kCUDA)
            fail(std::string(p.second) + ": only CPU and CUDA tensors are supported");
        if (a.device_type() != first.device_type() || a.device_id() != first.device_id())
            fail(std::string(p.second) + ": all tensors must be on the same device");
    }
    const bool cuda = first.device_type() == kCUDA;
    if (cuda && !fp4::cuda_compiled())
        throw std::runtime_error(
            "fp4_kernels was built without CUDA kernels (CPU-only build); CUDA tensors "
            "cannot be processed. Rebuild with nvcc available and FP4_ENABLE_CUDA=ON.");
    return {cuda, first.device_id()};
}

void quant(const Arr& x, const Arr& gs, const Arr& q, const Arr& s, bool swizzle,
           uintptr_t stream) {
    const fp4::DType dt = float_dtype(x, "x");
    if (x.ndim() != 2) fail("x: expected a 2-D tensor [M, K], got " + shape_str(x));
    const int64_t m = (int64_t)x.shape(0), k = (int64_t)x.shape(1);
    if (k % 16) fail("x: K must be a multiple of 16, got " + std::to_string(k));
    expect_f32(gs, "global_scale");
    if (gs.size() != 1) fail("global_scale: expected one element");
    expect_u8(q, "q");
    expect_u8(s, "scale");
    expect_shape(q, "q", m, k / 2);
    if (swizzle) expect_shape(s, "scale", (m + 127) / 128 * 128, (k / 16 + 3) / 4 * 4);
    else expect_shape(s, "scale", m, k / 16);
    auto dev = same_device({{&x, "x"}, {&gs, "global_scale"}, {&q, "q"}, {&s, "scale"}});
    fp4::QuantDesc d{(int64_t)(uintptr_t)x.data(), (int64_t)(uintptr_t)q.data(),
                     (int64_t)(uintptr_t)s.data(), (int64_t)(uintptr_t)gs.data(),
                     m, k, 0, swizzle ? 1 : 0};
    if (m == 0 || k == 0) return;
    if (dev.first) {
        fp4::cuda_quant(d, dt, dev.second, stream);
    } else {
        nb::gil_scoped_release nogil;
        fp4::cpu_quant(&d, 1, dt);
    }
}

// table: int64 [n, 8] rows of QuantDesc (see fp4_api.h), a CPU tensor; the pointers inside
// are of device `device_type` / `device_id`.
void grouped_quant(const Arr& table, int64_t n, int64_t total, int dtype_code, int device_type,
                   int device_id, uintptr_t stream) {
    const auto d = table.dtype();
    if (!(d.code == (uint8_t)nb::dlpack::dtype_code::Int && d.bits == 64))
        fail("table: expected int64");
    if (table.ndim() != 2 || (int64_t)table.shape(0) != n || table.shape(1) != 8)
        fail("table: expected shape [n, 8]");
    if (table.device_type() != kCPU) fail("table: must be a CPU tensor");
    if (dtype_code < 0 || dtype_code > 2) fail("dtype code must be 0, 1 or 2");
    if (n == 0 || total == 0) return;
    const auto* descs = static_cast<const fp4::QuantDesc*>(table.data());
    if (device_type == kCUDA) {
        if (!fp4::cuda_compiled())
            throw std::runtime_error("fp4_kernels was built without CUDA kernels (CPU-only build)");
        fp4::cuda_grouped_quant_host(descs, (int)n, (fp4::DType)dtype_code, device_id, stream);
    } else {
        nb::gil_scoped_release nogil;
        fp4::cpu_quant(descs, (int)n, (fp4::DType)dtype_code);
    }
}

// ---- lean CUDA entry points: raw device pointers, validated by the Python layer ----------
void need_cuda() {
    if (!fp4::cuda_compiled())
        throw std::runtime_error(
            "fp4_kernels was built without CUDA kernels (CPU-only build); CUDA tensors "
            "cannot be processed. Rebuild with nvcc available and FP4_ENABLE_CUDA=ON.");
}

fp4::DType dtype_of(int code) {
    if (code < 0 || code > 2) fail("dtype code must be 0, 1 or 2");
    return (fp4::DType)code;
}

void quant_cuda(uintptr_t x, uintptr_t gs, uintptr_t q, uintptr_t s, int64_t m, int64_t k,
                int dtype_code, bool swizzle, int device, uintptr_t stream) {
    need_cuda();
    const fp4::DType dt = dtype_of(dtype_code);
    if (m <= 0 || k <= 0) return;
    fp4::QuantDesc d{(int64_t)x, (int64_t)q, (int64_t)s, (int64_t)gs, m, k, 0, swizzle ? 1 : 0};
    fp4::cuda_quant(d, dt, device, stream);
}

// Matrix i reads xs[i] ([ms[i], ks[i]]) and writes its codes and scales back to back into
// the packed buffers at q_base / s_base (offsets: prefix sums of m*k/2 and of the scale
// matrix sizes, unswizzled [m, k/16] or swizzled [round_up(m,128), round_up(k/16,4)]);
// its global scale is the float at gs_base + 4 * i.
void grouped_quant_cuda(const std::vector<int64_t>& xs, const std::vector<int64_t>& ms,
                        const std::vector<int64_t>& ks, uintptr_t q_base, uintptr_t s_base,
                        uintptr_t gs_base, int dtype_code, bool swizzle, int device,
                        uintptr_t stream) {
    need_cuda();
    const fp4::DType dt = dtype_of(dtype_code);
    const size_t n = xs.size();
    if (ms.size() != n || ks.size() != n) fail("xs, ms, ks: lengths differ");
    std::vector<fp4::QuantDesc> descs(n);
    int64_t qo = 0, so = 0;
    for (size_t i = 0; i < n; ++i) {
        const int64_t m = ms[i], k = ks[i], kb = k / 16;
        if (m < 0 || k < 0 || k % 16) fail("grouped quant: bad shape");
        descs[i] = fp4::QuantDesc{xs[i], (int64_t)q_base + qo, (int64_t)s_base + so,
                                  (int64_t)gs_base + 4 * (int64_t)i, m, k, 0, swizzle ? 1 : 0};
        qo += m * k / 2;
        so += swizzle ? (m + 127) / 128 * 128 * ((kb + 3) / 4 * 4) : m * kb;
    }
    if (n) fp4::cuda_grouped_quant_host(descs.data(), (int)n, dt, device, stream);
}

// Stacked experts (scaled_fp4_grouped_quant with expert_offsets): x [t, k], rows of expert e
// are [offsets[e], offsets[e+1]). CUDA: offsets in device memory, read by the kernel. CPU:
// host offsets, checked by the Python layer.
void experts_quant(uintptr_t x, uintptr_t gs, uintptr_t offsets, bool off64, uintptr_t q,
                   uintptr_t s, int64_t t, int64_t k, int e, int dtype_code, int device_type,
                   int device, uintptr_t stream) {
    const fp4::DType dt = dtype_of(dtype_code);
    if (t <= 0 || k <= 0 || e <= 0) return;
    if (k % 16) fail("experts quant: K must be a multiple of 16");
    if (device_type == kCUDA) {
        need_cuda();
        fp4::cuda_experts_quant(reinterpret_cast<const void*>(x), reinterpret_cast<const float*>(gs),
                                reinterpret_cast<const void*>(offsets), off64,
                                reinterpret_cast<uint8_t*>(q), reinterpret_cast<uint8_t*>(s), t, k, e,
                                dt, device, stream);
        return;
    }
    const int64_t esize = dt == fp4::DType::F32 ? 4 : 2;
    std::vector<fp4::QuantDesc> descs;
    for (int i = 0; i < e; ++i) {
        const int64_t lo = off64 ? reinterpret_cast<const int64_t*>(offsets)[i]
                                 : reinterpret_cast<const int32_t*>(offsets)[i];
        const int64_t hi = off64 ? reinterpret_cast<const int64_t*>(offsets)[i + 1]
                                 : reinterpret_cast<const int32_t*>(offsets)[i + 1];
        if (lo < 0 || hi > t || hi < lo) fail("expert_offsets: must rise from 0 to the number of rows");
        if (hi == lo) continue;
        descs.push_back(fp4::QuantDesc{(int64_t)x + lo * k * esize, (int64_t)q + lo * (k / 2),
                                       (int64_t)s + lo * (k / 16), (int64_t)gs + 4 * i, hi - lo, k,
                                       0, 0});
    }
    nb::gil_scoped_release nogil;
    fp4::cpu_quant(descs.data(), (int)descs.size(), dt);
}

// ---- list form of the grouped quantize: descriptors built here, not in Python ----------------
// Reads data_ptr(), shape, dtype, get_device() and is_contiguous() of each tensor of `xs` with
// one C-API call each (no Python frames), asks `alloc(q_shape, s_shape, zero_scales)` for the two
// packed output buffers (2-D when all K are equal, else flat), launches, and returns
// (q_all, s_all, rows, scale_rows).
// Returns None (the caller takes the general path) when a matrix is not contiguous or not
// 16-byte aligned. Raises ValueError naming xs[i] for a bad dtype, device or shape.
PyObject* attr_name(const char* s) {
    PyObject* o = PyUnicode_InternFromString(s);
    if (!o) throw nb::python_error();
    return o;
}

nb::object grouped_quant_list(nb::handle xs, nb::handle dtype, int dtype_code, int device,
                              bool swizzle, uintptr_t gs, uintptr_t stream, nb::handle alloc) {
    static PyObject* s_data_ptr = attr_name("data_ptr");
    static PyObject* s_shape = attr_name("shape");
    static PyObject* s_dtype = attr_name("dtype");
    static PyObject* s_get_device = attr_name("get_device");
    static PyObject* s_contig = attr_name("is_contiguous");
    const fp4::DType dt = dtype_of(dtype_code);
    nb::object seq = nb::steal(PySequence_Fast(xs.ptr(), "xs: expected a sequence of tensors"));
    if (!seq.is_valid()) throw nb::python_error();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    std::vector<int64_t> ptr(n), ms(n), ks(n);
    auto call = [](PyObject* o, PyObject* name) {
        nb::object r = nb::steal(PyObject_CallMethodObjArgs(o, name, nullptr));
        if (!r.is_valid()) throw nb::python_error();
        return r;
    };
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* x = items[i];
        const std::string who = "xs[" + std::to_string(i) + "]";
        nb::object d = nb::steal(PyObject_GetAttr(x, s_dtype));
        if (!d.is_valid()) {
            PyErr_Clear();
            throw nb::type_error((who + ": expected a torch.Tensor").c_str());
        }
        if (d.ptr() != dtype.ptr()) fail(who + ": all matrices must share dtype and device");
        const long dev = PyLong_AsLong(call(x, s_get_device).ptr());
        if (dev != device) fail(who + ": all matrices must share dtype and device");
        nb::object shp = nb::steal(PyObject_GetAttr(x, s_shape));
        if (!shp.is_valid()) throw nb::python_error();
        if (PyTuple_Check(shp.ptr()) == 0 || PyTuple_GET_SIZE(shp.ptr()) != 2)
            fail(who + ": expected a 2-D tensor [M, K]");
        ms[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shp.ptr(), 0));
        ks[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shp.ptr(), 1));
        if (ks[i] % 16) fail(who + ": K (last dim) must be a multiple of 16, got " + std::to_string(ks[i]));
        if (!PyObject_IsTrue(call(x, s_contig).ptr())) return nb::none();
        ptr[i] = PyLong_AsLongLong(call(x, s_data_ptr).ptr());
        if ((ptr[i] & 15) && ms[i] && ks[i]) return nb::none();
    }
    bool same_k = n > 0;
    int64_t q_numel = 0, s_rows = 0, s_numel = 0;
    std::vector<int64_t> srows(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
        same_k = same_k && ks[i] == ks[0];
        const int64_t kb = ks[i] / 16;
        srows[i] = swizzle ? (ms[i] + 127) / 128 * 128 : ms[i];
        const int64_t scols = swizzle ? (kb + 3) / 4 * 4 : kb;
        q_numel += ms[i] * ks[i] / 2;
        s_rows += srows[i];
        s_numel += srows[i] * scols;
    }
    nb::object q_shape, sc_shape;
    if (same_k) {
        int64_t rows = 0;
        for (Py_ssize_t i = 0; i < n; ++i) rows += ms[i];
        q_shape = nb::make_tuple(rows, ks[0] / 2);
        sc_shape = nb::make_tuple(s_rows, swizzle ? (ks[0] / 16 + 3) / 4 * 4 : ks[0] / 16);
    } else {
        q_shape = nb::make_tuple(q_numel);
        sc_shape = nb::make_tuple(s_numel);
    }
    nb::object bufs = alloc(q_shape, sc_shape, swizzle);
    nb::object q_all = bufs[0], s_all = bufs[1];
    const int64_t q_base = PyLong_AsLongLong(call(q_all.ptr(), s_data_ptr).ptr());
    const int64_t s_base = PyLong_AsLongLong(call(s_all.ptr(), s_data_ptr).ptr());
    std::vector<fp4::QuantDesc> descs(n);
    int64_t qo = 0, so = 0, start = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        const int64_t kb = ks[i] / 16;
        descs[i] = fp4::QuantDesc{ms[i] ? ptr[i] : 0, q_base + qo, s_base + so, (int64_t)gs + 4 * i,
                                  ms[i], ks[i], start, swizzle ? 1 : 0};
        qo += ms[i] * ks[i] / 2;
        so += srows[i] * (swizzle ? (kb + 3) / 4 * 4 : kb);
        start += ms[i] * kb;
    }
    if (n && start) {
        if (device >= 0) {
            need_cuda();
            fp4::cuda_grouped_quant_host(descs.data(), (int)n, dt, device, stream);
        } else {
            nb::gil_scoped_release nogil;
            fp4::cpu_quant(descs.data(), (int)n, dt);
        }
    }
    nb::list rows, sr;
    for (Py_ssize_t i = 0; i < n; ++i) {
        rows.append(ms[i]);
        sr.append(srows[i]);
    }
    return nb::make_tuple(q_all, s_all, rows, sr);
}

void dequant_cuda(uintptr_t q, uintptr_t s, uintptr_t gs, uintptr_t out, int64_t m, int64_t k,
                  int dtype_code, int device, uintptr_t stream) {
    need_cuda();
    const fp4::DType dt = dtype_of(dtype_code);
    if (m <= 0 || k <= 0) return;
    fp4::cuda_dequant(reinterpret_cast<const uint8_t*>(q), reinterpret_cast<const uint8_t*>(s),
                      reinterpret_cast<const float*>(gs), reinterpret_cast<void*>(out), m, k, dt,
                      device, stream);
}

void dequant_pair_cuda(uintptr_t aq, uintptr_t as, uintptr_t bq, uintptr_t bs, uintptr_t out,
                       int64_t m, int64_t n, int64_t k, int dtype_code, int device,
                       uintptr_t stream) {
    need_cuda();
    const fp4::DType dt = dtype_of(dtype_code);
    if (m + n <= 0 || k <= 0) return;
    fp4::cuda_dequant_pair(reinterpret_cast<const uint8_t*>(aq), reinterpret_cast<const uint8_t*>(as),
                           reinterpret_cast<const uint8_t*>(bq), reinterpret_cast<const uint8_t*>(bs),
                           reinterpret_cast<void*>(out), m, n, k, dt, device, stream);
}

void cublas_gemm(uintptr_t handle, int64_t m, int64_t n, int64_t k, uintptr_t a, uintptr_t b,
                 int ab_dtype_code, uintptr_t out, int out_dtype_code, uintptr_t alpha,
                 uintptr_t zero, float alpha_value) {
    need_cuda();
    fp4::cublas_gemm_nt(handle, m, n, k, reinterpret_cast<const void*>(a),
                        reinterpret_cast<const void*>(b), dtype_of(ab_dtype_code),
                        reinterpret_cast<void*>(out), dtype_of(out_dtype_code),
                        reinterpret_cast<const float*>(alpha), reinterpret_cast<const float*>(zero),
                        alpha_value);
}

void dequant(const Arr& q, const Arr& s, const Arr& gs, const Arr& out, uintptr_t stream) {
    const fp4::DType dt = float_dtype(out, "out");
    if (out.ndim() != 2) fail("out: expected a 2-D tensor");
    const int64_t m = (int64_t)out.shape(0), k = (int64_t)out.shape(1);
    if (k % 16) fail("K must be a multiple of 16, got " + std::to_string(k));
    expect_u8(q, "q");
    expect_u8(s, "scale");
    expect_f32(gs, "global_scale");
    if (gs.size() != 1) fail("global_scale: expected one element");
    expect_shape(q, "q", m, k / 2);
    expect_shape(s, "scale", m, k / 16);
    auto dev = same_device({{&q, "q"}, {&s, "scale"}, {&gs, "global_scale"}, {&out, "out"}});
    if (m == 0 || k == 0) return;
    auto* qp = static_cast<const uint8_t*>(q.data());
    auto* sp = static_cast<const uint8_t*>(s.data());
    auto* gp = static_cast<const float*>(gs.data());
    if (dev.first) {
        fp4::cuda_dequant(qp, sp, gp, out.data(), m, k, dt, dev.second, stream);
    } else {
        nb::gil_scoped_release nogil;
        fp4::cpu_dequant(qp, sp, gp, out.data(), m, k, dt);
    }
}

void mm(const Arr& aq, const Arr& bq, const Arr& as, const Arr& bs, const Arr& alpha,
        const Arr& out, uintptr_t stream) {
    const fp4::DType dt = float_dtype(out, "out");
    expect_u8(aq, "a_q");
    expect_u8(bq, "b_q");
    expect_u8(as, "a_scale");
    expect_u8(bs, "b_scale");
    expect_f32(alpha, "alpha");
    if (alpha.size() != 1) fail("alpha: expected one element");
    if (aq.ndim() != 2 || bq.ndim() != 2) fail("a_q, b_q: expected 2-D tensors");
    const int64_t m = (int64_t)aq.shape(0), n = (int64_t)bq.shape(0), k = 2 * (int64_t)aq.shape(1);
    if (k % 16) fail("K must be a multiple of 16, got " + std::to_string(k));
    expect_shape(bq, "b_q", n, k / 2);
    expect_shape(as, "a_scale", m, k / 16);
    expect_shape(bs, "b_scale", n, k / 16);
    expect_shape(out, "out", m, n);
    auto dev = same_device({{&aq, "a_q"}, {&bq, "b_q"}, {&as, "a_scale"}, {&bs, "b_scale"},
                            {&alpha, "alpha"}, {&out, "out"}});
    if (m == 0 || n == 0) return;
    auto* a = static_cast<const uint8_t*>(aq.data());
    auto* b = static_cast<const uint8_t*>(bq.data());
    auto* sa = static_cast<const uint8_t*>(as.data());
    auto* sb = static_cast<const uint8_t*>(bs.data());
    auto* al = static_cast<const float*>(alpha.data());
    if (dev.first) {
        if (k % 64) fail("CUDA path: K must be a multiple of 64 (the Python layer pads)");
        fp4::cuda_mm(a, b, sa, sb, al, out.data(), m, n, k, dt, dev.second, stream);
    } else {
        nb::gil_scoped_release nogil;
        fp4::cpu_mm(a, b, sa, sb, al, out.data(), m, n, k, dt);
    }
}

// ---- fused skinny / grouped GEMM: raw pointers, validated by the Python layer (_gemm.py) ----
fp4::SkinnyProblem skinny_problem(int a_kind, uintptr_t a, uintptr_t a_scale, uintptr_t b_q,
                                  uintptr_t b_scale, uintptr_t alpha, bool alpha_per_expert,
                                  float alpha_value, uintptr_t offsets, bool offsets_int64, uintptr_t out,
                                  int out_dtype_code, int64_t t, int64_t n, int64_t k, int e,
                                  int tm, int kw, int split, bool no_omma) {
    if (a_kind < 0 || a_kind > 2) fail("a_kind must be 0 (NVFP4), 1 (bf16) or 2 (fp16)");
    if (t < 0 || n < 0 || k < 0 || k % 16 || e < 1) fail("skinny mm: bad shape");
    if (!(tm == 0 || tm == 8 || tm == 16 || tm == 32 || tm == 64)) fail("tm must be 0, 8, 16, 32 or 64");
    fp4::SkinnyProblem p;
    p.a_kind = a_kind;
    p.a = reinterpret_cast<const void*>(a);
    p.a_scale = reinterpret_cast<const uint8_t*>(a_scale);
    p.b_q = reinterpret_cast<const uint8_t*>(b_q);
    p.b_scale = reinterpret_cast<const uint8_t*>(b_scale);
    p.alpha = reinterpret_cast<const float*>(alpha);
    p.alpha_per_expert = alpha_per_expert;
    p.alpha_value = alpha_value;
    p.offsets = reinterpret_cast<const void*>(offsets);
    p.offsets_int64 = offsets_int64;
    p.out = reinterpret_cast<void*>(out);
    p.out_dt = dtype_of(out_dtype_code);
    p.t = t;
    p.n = n;
    p.k = k;
    p.e = e;
    p.tm = tm;
    p.kw = kw;
    p.split = split;
    p.no_omma = no_omma;
    return p;
}

void skinny_mm_cuda(int a_kind, uintptr_t a, uintptr_t a_scale, uintptr_t b_q, uintptr_t b_scale,
                    uintptr_t alpha, bool alpha_per_expert, float alpha_value, uintptr_t offsets,
                    bool offsets_int64, uintptr_t out, int out_dtype_code, int64_t t, int64_t n,
                    int64_t k, int e, int tm, int kw, int split, bool no_omma, int device,
                    uintptr_t stream) {
    need_cuda();
    const fp4::SkinnyProblem p = skinny_problem(a_kind, a, a_scale, b_q, b_scale, alpha,
                                                alpha_per_expert, alpha_value, offsets,
                                                offsets_int64, out, out_dtype_code, t, n, k, e, tm,
                                                kw, split, no_omma);
    if (t == 0 || n == 0) return;
    fp4::cuda_skinny_mm(p, device, stream);
}

// The launch configuration the CUDA path would use: (tm, kw, split, row groups, omma).
std::tuple<int, int, int, int, bool> skinny_plan_cuda(int a_kind, int64_t t, int64_t n, int64_t k,
                                                      int e, bool grouped, int tm, int kw,
                                                      int split, bool no_omma, int device) {
    need_cuda();
    fp4::SkinnyProblem p;
    p.a_kind = a_kind;
    p.t = t;
    p.n = n;
    p.k = k;
    p.e = e;
    p.offsets = grouped ? reinterpret_cast<const void*>(uintptr_t(16)) : nullptr;
    p.tm = tm;
    p.kw = kw;
    p.split = split;
    p.no_omma = no_omma;
    const fp4::SkinnyPlan pl = fp4::skinny_plan(p, device);
    return {pl.tm, pl.kw, pl.split, pl.groups, pl.omma};
}

void skinny_mm_cpu(int a_kind, uintptr_t a, uintptr_t a_scale, uintptr_t b_q, uintptr_t b_scale,
                   uintptr_t alpha, bool alpha_per_expert, float alpha_value, uintptr_t offsets,
                   bool offsets_int64, uintptr_t out, int out_dtype_code, int64_t t, int64_t n,
                   int64_t k, int e) {
    const fp4::SkinnyProblem p = skinny_problem(a_kind, a, a_scale, b_q, b_scale, alpha,
                                                alpha_per_expert, alpha_value, offsets,
                                                offsets_int64, out, out_dtype_code, t, n, k, e, 0,
                                                0, 0, false);
    if (t == 0 || n == 0) return;
    nb::gil_scoped_release nogil;
    fp4::cpu_skinny_mm(p);
}

// ---- fused W4A16 GEMM on prepacked weights (cuda_pk.cu): raw pointers, validated by _gemm.py ----
fp4::PkProblem pk_problem(int a_kind, uintptr_t a, int64_t lda, uintptr_t w, uintptr_t alpha,
                          float alpha_value, uintptr_t out, int out_dtype_code, int64_t t, int64_t n,
                          int64_t k, int nt, int u, int rt, int split, int un) {
    if (a_kind != 1 && a_kind != 2) fail("prepacked mm: a_kind must be 1 (bf16) or 2 (fp16)");
    if (t < 0 || n < 0 || k <= 0 || k % 16 || nt < 0 || u < 0) fail("prepacked mm: bad shape");
    if (!(rt == 0 || rt == 1 || rt == 2 || rt == 4 || rt == 8)) fail("rt must be 0, 1, 2, 4 or 8");
    if (split < 0 || split > 8) fail("split must be 0..8");
    if (un < 0 || un > 2) fail("un must be 0, 1 or 2");
    fp4::PkProblem p;
    p.a_kind = a_kind;
    p.a = reinterpret_cast<const void*>(a);
    p.lda = lda;
    p.w = reinterpret_cast<const uint8_t*>(w);
    p.alpha = reinterpret_cast<const float*>(alpha);
    p.alpha_value = alpha_value;
    p.out = reinterpret_cast<void*>(out);
    p.out_dt = dtype_of(out_dtype_code);
    p.t = t;
    p.n = n;
    p.k = k;
    p.nt = nt;
    p.u = u;
    p.rt = rt;
    p.split = split;
    p.un = un;
    return p;
}

// Which kernel runs the prepacked GEMM: by M and the GPU (0), or forced for a benchmark: the
// mma.sync kernel of cuda_pk.cu (1) or the wgmma kernel of cuda_wg.cu (2). Process-wide.
int g_pk_kernel = 0;
// M from which the wgmma kernel runs on a 9.0 GPU (below: cuda_pk.cu), and up to which either
// beats dequantize + cuBLAS (bench/NOTES.md, "Issue 28").
constexpr int64_t kWgMinRows = 17, kWgMaxRows = 256, kPkMaxRows = 64;
// Weights whose plan at M = kWgWideRows has two warpgroups on 256-token tiles keep the wgmma kernel up
// to there: M = 512 8192^2 112.0 us against dequantize + cuBLAS's 150.5, 14336x4096 119.8 / 141.9,
// 4096x14336 101.9 / 130.4; at M = 1024 it won on two of the three large shapes by 5-9% and lost on
// 14336x4096 (243 / 205: 3.4 waves), at 2048 on none (bench/NOTES.md, "Issue 28: wide tiles", H100).
constexpr int64_t kWgWideRows = 512;
// Weights of at least this many elements (N x K) keep the wgmma kernel up to kWgMaxRows; smaller
// ones go to dequantize + cuBLAS above kPkMaxRows (bench/results/2026-12-02-h200-issue28-wg/
// r2_final.txt: 2048x7168 M = 128 wg 32.1 vs 26.3 us, 8192x8192 43.2 vs 84.9; M = 512 the
// dequantize path wins or ties on every shape).
constexpr int64_t kWgMinElems = int64_t(1) << 25;

// 9..16 tokens: the wgmma kernel for bf16 activations and weights of at least kWgMinElems with
// N >= 8192 where its plan splits no K range (14336x4096 M = 16: 24.2-24.9 us against the mma.sync
// kernel's 25.0-25.5 in four runs on an H200 and an H100); with a K split (8192^2: 27.7-28.9 against
// 24.1-24.9) and for fp16 activations (14336x4096 28.2-29.1 against 25.5-26.6) cuda_pk.cu is faster,
// as for narrower weights (4096x14336 27.6 against 21.2; bench/NOTES.md, "Issue 28", runs t1, e1-e3).
constexpr int64_t kWgWideMinRows = 9, kWgWideN = 8192;
// 17..32 tokens: the wgmma kernel where its plan splits K at most in 2; narrow weights whose plan
// splits K in 4 or 8 (few row groups) are faster on cuda_pk.cu (2048x7168 M = 32: 14.3-14.5 us
// against 19.2-19.9, 4096x14336 38.2-39.3 against 41.0-42.8 in five runs on an H200 and H100s),
// while at 64 tokens the wgmma kernel wins even there (4096x14336 49.6 against 73.9).
constexpr int64_t kWgSplitRows = 32;
constexpr int kWgMaxSplitSmall = 2;

// `plan` receives the wgmma kernel's plan where the choice needed it (M = 9 .. 32), so the launch
// does not make it twice (its occupancy lookups take a lock: host time per eager call).
bool use_wg(const fp4::PkProblem& p, int device, fp4::WgPlan* plan, bool* planned) {
    *planned = false;
    if (g_pk_kernel == 1) return false;
    if (!fp4::wg_supported(device)) {
        if (g_pk_kernel == 2) fail("the wgmma GEMM needs an sm_90a build on a compute capability 9.0 GPU");
        return false;
    }
    if (g_pk_kernel == 2 || p.t > kWgSplitRows) return true;
    if (p.t < kWgMinRows &&
        !(p.t >= kWgWideMinRows && p.a_kind == 1 && p.n >= kWgWideN && p.n * p.k >= kWgMinElems))
        return false;
    *plan = fp4::wg_plan(p, device);
    *planned = true;
    return plan->split <= (p.t >= kWgMinRows ? kWgMaxSplitSmall : 1);
}

void set_pk_kernel(const std::string& name) {
    if (name == "auto") g_pk_kernel = 0;
    else if (name == "pk") g_pk_kernel = 1;
    else if (name == "wg") g_pk_kernel = 2;
    else fail("pk kernel: expected 'auto', 'pk' or 'wg', got '" + name + "'");
}

// The largest M the prepacked kernels take on `device` for an [n, k] weight (above it:
// dequantize + cuBLAS).
// A smaller weight keeps the wgmma kernel up to kWgMaxRows too where the plan gives 128-token tiles
// two consumer warpgroups (its K split stays small: enough row groups): 7168x2048 M = 128 18.2 us
// against dequantize + cuBLAS's 21.3, M = 256 24.6 against 27.2; not 2048x7168 (split 8, one
// warpgroup: 29.9 against 29.1, 42.6 against 33.4; bench/NOTES.md, "Issue 28: the epilogue", H100 e2).
int64_t pk_max_rows(int device, int64_t n, int64_t k) {
    need_cuda();
    if (g_pk_kernel == 1 || !fp4::wg_supported(device)) return kPkMaxRows;
    if (g_pk_kernel == 2) return int64_t(1) << 30;  // forced: the wgmma kernel at every M
    if (n <= 0 || k <= 0 || k % 128) return n * k >= kWgMinElems ? kWgMaxRows : kPkMaxRows;
    if (n * k >= kWgMinElems) {
        const fp4::PkProblem p = pk_problem(1, 0, k, 0, 0, 1.0f, 0, 2, kWgWideRows, n, k, (int)((n + 15) / 16),
                                            (int)((k + 127) / 128), 0, 0, 0);
        const fp4::WgPlan pl = fp4::wg_plan(p, device);
        return pl.groups > 1 && pl.nt > 128 ? kWgWideRows : kWgMaxRows;
    }
    const fp4::PkProblem p = pk_problem(1, 0, k, 0, 0, 1.0f, 0, 2, 128, n, k, (int)((n + 15) / 16),
                                        (int)((k + 127) / 128), 0, 0, 0);
    return fp4::wg_plan(p, device).groups > 1 ? kWgMaxRows : kPkMaxRows;
}

// Above kWgWideRows, up to kWgWideMaxRows: the wide plan where its grid fills at least kWgWideFill of
// its waves' CTA slots and token tiles (WgPlan::fill), else dequantize + cuBLAS. M = 1024 (H100, graph,
// the wgmma kernel forced against dequantize + cuBLAS, runs w2 and d3): 8192^2 222.4 / 224.4 us against
// 243.8 / 251.5 (256 CTAs in 2 waves of 132: fill 0.97), 4096x14336 193.3 / 197.7 against 205.6 / 207.8
// (128 CTAs: 0.97), but 14336x4096 243.2 / 244.6 against 204.8 / 218.4 (448 CTAs in 4 waves: 0.85); at
// 2048 the wide tile lost on every shape (bench/NOTES.md, "Issue 28: wide tiles").
constexpr int64_t kWgWideMaxRows = 1024;
constexpr float kWgWideFill = 0.9f;
bool pk_wide_takes(int device, int64_t n, int64_t k, int64_t m) {
    need_cuda();
    if (m <= kWgWideRows || m > kWgWideMaxRows || g_pk_kernel != 0 || k % 128 ||
        pk_max_rows(device, n, k) != kWgWideRows)
        return false;
    const fp4::PkProblem p = pk_problem(1, 0, k, 0, 0, 1.0f, 0, 2, m, n, k, (int)((n + 15) / 16),
                                        (int)((k + 127) / 128), 0, 0, 0);
    const fp4::WgPlan pl = fp4::wg_plan(p, device);
    return pl.groups > 1 && pl.nt > 128 && pl.fill >= kWgWideFill;
}

void pk_mm_cuda(int a_kind, uintptr_t a, int64_t lda, uintptr_t w, uintptr_t alpha, float alpha_value,
                uintptr_t out, int out_dtype_code, int64_t t, int64_t n, int64_t k, int nt, int u, int rt,
                int split, int un, int device, uintptr_t stream) {
    need_cuda();
    const fp4::PkProblem p = pk_problem(a_kind, a, lda, w, alpha, alpha_value, out, out_dtype_code, t, n,
                                        k, nt, u, rt, split, un);
    if (t == 0 || n == 0) return;
    fp4::WgPlan plan;
    bool planned = false;
    if (use_wg(p, device, &plan, &planned)) fp4::cuda_wg_mm(p, device, stream, planned ? &plan : nullptr);
    else fp4::cuda_pk_mm(p, device, stream);
}

// The wgmma kernel's launch plan: (tokens per CTA, split along K, scratch bytes, consumer
// warpgroups, units per stage, producer lanes, multicast CTAs, stage flow).
std::tuple<int, int, int64_t, int, int, int, int, int> wg_plan_cuda(int a_kind, int64_t t, int64_t n, int64_t k, int split, int device) {
    need_cuda();
    if (!fp4::wg_supported(device)) fail("the wgmma GEMM needs an sm_90a build on a compute capability 9.0 GPU");
    const int64_t nt = (n + 15) / 16, u = (k + 127) / 128;
    const fp4::PkProblem p = pk_problem(a_kind, 0, k, 0, 0, 1.0f, 0, 2, t, n, k, (int)nt, (int)u, 0, split, 0);
    const fp4::WgPlan pl = fp4::wg_plan(p, device);
    return {pl.nt, pl.split, pl.scratch, pl.groups, pl.units, pl.lanes, pl.mc, pl.flow};
}

void pk_dequant_cuda(uintptr_t w, uintptr_t out, int64_t n, int64_t k, int nt, int u, int dtype_code, int device,
                     uintptr_t stream) {
    need_cuda();
    if (n < 0 || k <= 0 || k % 16 || nt < 0 || u < 0) fail("prepacked dequantize: bad shape");
    fp4::cuda_pk_dequant(reinterpret_cast<const uint8_t*>(w), reinterpret_cast<void*>(out), n, k, nt, u,
                         dtype_of(dtype_code), device, stream);
}

// The launch configuration of the prepacked GEMM: (tokens per tile, rt, split, un).
std::tuple<int, int, int, int> pk_plan_cuda(int a_kind, int64_t t, int64_t n, int64_t k, int rt, int split,
                                            int un, int device) {
    need_cuda();
    const int64_t nt = (n + 15) / 16, u = (k + 127) / 128;
    const fp4::PkProblem p = pk_problem(a_kind, 0, k, 0, 0, 1.0f, 0, 2, t, n, k, (int)nt, (int)u, rt,
                                        split, un);
    const fp4::PkPlan pl = fp4::pk_plan(p, device);
    return {8 * pl.mt, pl.rt, pl.split, pl.un};
}

std::vector<std::string> split_archs(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == ';' || c == ',' || c == ' ') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

}  // namespace

NB_MODULE(_C, m) {
    m.doc() = "fp4_kernels compiled core (CPU + optional CUDA); use the fp4_kernels Python API.";
    m.def("quant", &quant, nb::arg("x"), nb::arg("gs"), nb::arg("q"), nb::arg("s"),
          nb::arg("swizzle"), nb::arg("stream"));
    m.def("grouped_quant", &grouped_quant, nb::arg("table"), nb::arg("n"), nb::arg("total"),
          nb::arg("dtype_code"), nb::arg("device_type"), nb::arg("device_id"), nb::arg("stream"));
    m.def("dequant", &dequant, nb::arg("q"), nb::arg("s"), nb::arg("gs"), nb::arg("out"),
          nb::arg("stream"));
    m.def("mm", &mm, nb::arg("a_q"), nb::arg("b_q"), nb::arg("a_s"), nb::arg("b_s"),
          nb::arg("alpha"), nb::arg("out"), nb::arg("stream"));
    m.def("quant_cuda", &quant_cuda, nb::arg("x"), nb::arg("gs"), nb::arg("q"), nb::arg("s"),
          nb::arg("m"), nb::arg("k"), nb::arg("dtype_code"), nb::arg("swizzle"),
          nb::arg("device"), nb::arg("stream"));
    m.def("grouped_quant_cuda", &grouped_quant_cuda, nb::arg("xs"), nb::arg("ms"), nb::arg("ks"),
          nb::arg("q_base"), nb::arg("s_base"), nb::arg("gs_base"), nb::arg("dtype_code"),
          nb::arg("swizzle"), nb::arg("device"), nb::arg("stream"));
    m.def("experts_quant", &experts_quant, nb::arg("x"), nb::arg("gs"), nb::arg("offsets"),
          nb::arg("off64"), nb::arg("q"), nb::arg("s"), nb::arg("t"), nb::arg("k"), nb::arg("e"),
          nb::arg("dtype_code"), nb::arg("device_type"), nb::arg("device"), nb::arg("stream"));
    m.def("grouped_quant_list", &grouped_quant_list, nb::arg("xs"), nb::arg("dtype"),
          nb::arg("dtype_code"), nb::arg("device"), nb::arg("swizzle"), nb::arg("gs"),
          nb::arg("stream"), nb::arg("alloc"));
    m.def("dequant_cuda", &dequant_cuda, nb::arg("q"), nb::arg("s"), nb::arg("gs"), nb::arg("out"),
          nb::arg("m"), nb::arg("k"), nb::arg("dtype_code"), nb::arg("device"), nb::arg("stream"));
    m.def("dequant_pair_cuda", &dequant_pair_cuda, nb::arg("a_q"), nb::arg("a_s"), nb::arg("b_q"),
          nb::arg("b_s"), nb::arg("out"), nb::arg("m"), nb::arg("n"), nb::arg("k"),
          nb::arg("dtype_code"), nb::arg("device"), nb::arg("stream"));
    m.def("skinny_mm_cuda", &skinny_mm_cuda, nb::arg("a_kind"), nb::arg("a"), nb::arg("a_scale"),
          nb::arg("b_q"), nb::arg("b_scale"), nb::arg("alpha"), nb::arg("alpha_per_expert"),
          nb::arg("alpha_value"), nb::arg("offsets"), nb::arg("offsets_int64"), nb::arg("out"), nb::arg("out_dtype_code"),
          nb::arg("t"), nb::arg("n"), nb::arg("k"), nb::arg("e"), nb::arg("tm"), nb::arg("kw"),
          nb::arg("split"), nb::arg("no_omma"), nb::arg("device"), nb::arg("stream"));
    m.def("skinny_plan_cuda", &skinny_plan_cuda, nb::arg("a_kind"), nb::arg("t"), nb::arg("n"),
          nb::arg("k"), nb::arg("e"), nb::arg("grouped"), nb::arg("tm"), nb::arg("kw"),
          nb::arg("split"), nb::arg("no_omma"), nb::arg("device"));
    m.def("skinny_mm_cpu", &skinny_mm_cpu, nb::arg("a_kind"), nb::arg("a"), nb::arg("a_scale"),
          nb::arg("b_q"), nb::arg("b_scale"), nb::arg("alpha"), nb::arg("alpha_per_expert"),
          nb::arg("alpha_value"), nb::arg("offsets"), nb::arg("offsets_int64"), nb::arg("out"), nb::arg("out_dtype_code"),
          nb::arg("t"), nb::arg("n"), nb::arg("k"), nb::arg("e"));
    m.def("pk_mm_cuda", &pk_mm_cuda, nb::arg("a_kind"), nb::arg("a"), nb::arg("lda"), nb::arg("w"),
          nb::arg("alpha"), nb::arg("alpha_value"), nb::arg("out"), nb::arg("out_dtype_code"), nb::arg("t"),
          nb::arg("n"), nb::arg("k"), nb::arg("nt"), nb::arg("u"), nb::arg("rt"), nb::arg("split"),
          nb::arg("un"), nb::arg("device"), nb::arg("stream"));
    m.def("set_pk_kernel", &set_pk_kernel, nb::arg("name"));
    m.def("pk_set_launch", &fp4::pk_set_launch, nb::arg("pdl"), nb::arg("prefetch"));
    m.def("pk_max_rows", &pk_max_rows, nb::arg("device"), nb::arg("n"), nb::arg("k"));
    m.def("pk_wide_takes", &pk_wide_takes, nb::arg("device"), nb::arg("n"), nb::arg("k"), nb::arg("m"));
    m.def("wg_set_reduce", &fp4::wg_set_reduce, nb::arg("mode"));
    m.def("wg_set_pdl", &fp4::wg_set_pdl, nb::arg("on"));
    m.def("wg_set_chain", &fp4::wg_set_chain, nb::arg("on"));
    m.def("wg_set_tuning", &fp4::wg_set_tuning, nb::arg("groups"), nb::arg("units"), nb::arg("lanes"));
    m.def("wg_set_multicast", &fp4::wg_set_multicast, nb::arg("ctas"));
    m.def("wg_set_tile", &fp4::wg_set_tile, nb::arg("nt"));
    m.def("wg_set_stages", &fp4::wg_set_stages, nb::arg("st"));
    m.def("wg_set_diag", &fp4::wg_set_diag, nb::arg("mode"));
    m.def("wg_set_weight_copy", &fp4::wg_set_weight_copy, nb::arg("mode"));
    m.def("wg_set_stage_flow", &fp4::wg_set_stage_flow, nb::arg("mode"));
    m.def("wg_supported", [](int device) { return fp4::cuda_compiled() && fp4::wg_supported(device); },
          nb::arg("device"));
    m.def("wg_plan_cuda", &wg_plan_cuda, nb::arg("a_kind"), nb::arg("t"), nb::arg("n"), nb::arg("k"),
          nb::arg("split"), nb::arg("device"));
    m.def("pk_dequant_cuda", &pk_dequant_cuda, nb::arg("w"), nb::arg("out"), nb::arg("n"), nb::arg("k"),
          nb::arg("nt"), nb::arg("u"), nb::arg("dtype_code"), nb::arg("device"), nb::arg("stream"));
    m.def("pk_plan_cuda", &pk_plan_cuda, nb::arg("a_kind"), nb::arg("t"), nb::arg("n"), nb::arg("k"),
          nb::arg("rt"), nb::arg("split"), nb::arg("un"), nb::arg("device"));
    m.def("cublas_load", &fp4::cublas_load, nb::arg("lib"));
    m.def("cublas_gemm", &cublas_gemm, nb::arg("handle"), nb::arg("m"), nb::arg("n"), nb::arg("k"),
          nb::arg("a"), nb::arg("b"), nb::arg("ab_dtype_code"), nb::arg("out"),
          nb::arg("out_dtype_code"), nb::arg("alpha"), nb::arg("zero"), nb::arg("alpha_value") = 0.0f);
    m.def("cuda_compiled", &fp4::cuda_compiled);
    m.def("cuda_device_count", &fp4::cuda_device_count);
    m.def("cuda_archs", []() { return split_archs(FP4_CUDA_ARCHS); });
    m.def("nvcc_version", []() { return std::string(FP4_NVCC_VERSION); });
}
