"""The allowlist over load_inline's C++/CUDA (native_scan.py): what kernels and their host wrappers
write passes; Python from C++, system calls, libc I/O, threads and anything unknown is named."""

import pytest

from kernelloop.tools.verify.native_scan import first_unknown
from kernelloop.tools.verify.static_check import first_violation

HONEST = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp16.h>
#include <vector>
#include <algorithm>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define WARP_SIZE 32
namespace cg = cooperative_groups;
using namespace nvcuda;
enum class Mode { Fast, Slow };
enum Kind { KA = 0, KB, KC };
typedef float real_t;
using vec_t = float4;
struct AddOp { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
template <typename T>
struct Pair { T a; T b; Pair(T x, T y) : a(x), b(y) {} };

template <typename T, int BLOCK>
__device__ __forceinline__ T warpReduceSum(T val) {
    #pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) val += __shfl_down_sync(0xffffffff, val, offset);
    return val;
}

template <typename scalar_t>
__global__ void __launch_bounds__(256) softmax_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y,
                                                      int rows, int cols) {
    extern __shared__ float smem[];
    int row = blockIdx.x, tid = threadIdx.x;
    float m = -INFINITY, s = 0.f;
    const float4* xv = reinterpret_cast<const float4*>(x + row * cols);
    for (int i = tid; i < cols / 4; i += blockDim.x) { float4 v = __ldg(&xv[i]); m = fmaxf(m, fmaxf(v.x, v.w)); }
    m = warpReduceSum<float, 256>(m);
    float a = 0.f, b, *c = nullptr;
    for (int i = tid; i < cols; i += blockDim.x) { s += __expf(static_cast<float>(x[row * cols + i]) - m); }
    AddOp op; s = op(s, 1.0f);
    Pair<float> pr(1.f, 2.f);
    auto twice = [&](int k) { return k * 2; };
    real_t r = max(s, 0.f) + min(1.f, 2.f) + sqrtf(s) + rsqrtf(s) + tanhf(s) + erff(s) + powf(s, 2.f) + twice(3);
    r += __half2float(__float2half(r)) + (float)KA + a;
    atomicAdd(&smem[0], r);
    for (int i = tid; i < cols; i += blockDim.x) y[row * cols + i] = static_cast<scalar_t>(r / s);
}

torch::Tensor softmax_cuda(torch::Tensor x);

torch::Tensor softmax_cuda(torch::Tensor x) {
    CHECK_INPUT(x);
    const at::cuda::OptionalCUDAGuard device_guard(device_of(x));
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    if (rows < 0) { throw std::runtime_error("Invalid dimensions"); }
    std::vector<int64_t> sizes(2, 0);
    std::sort(sizes.begin(), sizes.end());
    dim3 grid(CEIL_DIV(rows, 1)), block(256);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "softmax_cuda", ([&] {
        softmax_kernel<scalar_t><<<grid, block, 256 * sizeof(float), stream>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), rows, cols);
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) { printf("CUDA error: %s\n", cudaGetErrorString(err)); }
    auto acc = x.packed_accessor32<float, 2, torch::RestrictPtrTraits>();
    float inf = std::numeric_limits<float>::infinity();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("softmax_cuda", &softmax_cuda, "softmax (CUDA)", py::arg("x"));
}
'''


ERROR_CHECKS = r'''
#include <torch/extension.h>
#include <cuda_fp16.h>
struct __align__(16) Vec { float a[4]; };
struct alignas(8) Pair2 { float x, y; };
union { float f; int i; } bits;
namespace {
constexpr uint32_t kChunk = 4096u;
template<int THREADS>
__global__ void k(const uint32_t * A, uint32_t * result, uint32_t n) {
    __shared__ uint32_t best[THREADS];
    best[threadIdx.x] = A[threadIdx.x] & ~31ll;
    const uint32_t mask = __ballot_sync(0xffffffffu, best[0] != 0u);
    if (threadIdx.x == 0) atomicMax(result, max(mask, (uint32_t)__clz(best[0])));
}
}  // namespace
__device__ float g(Vec v, Pair2 p) {
    auto [q, r] = std::make_pair(1, 2);
    float s __attribute__((unused)) = 0;
    return v.a[0] + p.x + q + r + bits.f + s + __half2float(__hmul(__float2half(1.f), __float2half(2.f)));
}
inline void gpuAssert(cudaError_t code, const char *file, int line, bool abort=true) {
    if (code != cudaSuccess) {
        fprintf(stderr, "GPUassert: %s %s %d\n", cudaGetErrorString(code), file, line);
        if (abort) exit(EXIT_FAILURE);
    }
}
#define gpuErrchk(ans) { gpuAssert((ans), __FILE__, __LINE__); }
void h(torch::Tensor x) {
    gpuErrchk(cudaSetDevice(x.get_device()));
    uint32_t* d = nullptr;
    cudaMalloc(&d, sizeof(uint32_t));
    k<256><<<dim3(1u, 1u, 1u), 256>>>(d, d, kChunk);
    cudaFree(d);
}
'''


def test_what_kernels_and_their_wrappers_write_passes():
    assert first_unknown(HONEST) is None
    assert first_unknown(ERROR_CHECKS) is None


WRAPPER = "torch::Tensor f(torch::Tensor x) {{ {} return x; }}"


@pytest.mark.parametrize(("body", "named"), [
    # Python from C++: pybind11's eval and exec (templated too), imports, globals; the C API
    ('py::eval<py::eval_statements>("import os");', "py::eval"),
    ('pybind11::exec("x = 1");', "pybind11::exec"),
    ('py::eval("1");', "py::eval"),
    ('auto os = py::module_::import("os");', "py::import"),
    ('auto g = py::globals();', "py::globals"),
    ('PyRun_SimpleString("print(1)");', "PyRun_SimpleString"),
    ('Py_Initialize();', "Py_Initialize"),
    ('x.attr("add_")(1);', ".attr"),
    # system calls and libc I/O the old deny list did not name
    ('char b[8]; read(0, b, 8);', "read"),
    ('write(1, "x", 1);', "write"),
    ('char b[64]; readlink("/proc/self/exe", b, 64);', "readlink"),
    ('fcntl(0, 0);', "fcntl"),
    ('dup(1);', "dup"),
    ('clone(nullptr, nullptr, 0, nullptr);', "clone"),
    ('char t[] = "XXXXXX"; mkstemp(t);', "mkstemp"),
    ('posix_fallocate(3, 0, 1 << 30);', "posix_fallocate"),
    ('chmod("/tmp/x", 0777);', "chmod"),
    ('mkdir("/tmp/x", 0777);', "mkdir"),
    ('sleep(10);', "sleep"),
    ('std::this_thread::sleep_for(std::chrono::seconds(1));', "this_thread"),
    ('at::launch([]{});', "at::launch"),
    ('::read(0, nullptr, 0);', "::read"),
    ('std::ofstream out("claims.json");', "ofstream"),
    ('torch::jit::compile("def f(x): return x");', "jit"),
    ('cudaStream_t s; cudaStreamCreate(&s);', "cudaStreamCreate"),
    ('cudaLaunchHostFunc(0, nullptr, nullptr);', "cudaLaunchHostFunc"),
])
def test_reaching_outside_is_refused_with_the_name(body, named):
    why = first_unknown(WRAPPER.format(body))
    assert why is not None and named.split("::")[-1].lstrip(".") in why, why


@pytest.mark.parametrize(("source", "named"), [
    ("#include <unistd.h>\n", "unistd.h"),
    ("long read(int, void*, size_t);\nint f() { char b[4]; return (int)read(0, b, 4); }", "read"),
    ("void write(float* p) { *p = 0; }\nvoid g() { write(1, \"x\", 1); }", "write"),
    ('TORCH_LIBRARY(aten, m) { m.def("relu"); }', "TORCH_LIBRARY"),
    ("struct { int a; } read;\nint f() { return 0; }", "read"),
    ("#line 1 \"x\"\n", "directive"),
])
def test_declarations_headers_and_registration_are_refused(source, named):
    why = first_unknown(source)
    assert why is not None and named in why, why


def test_the_lint_reads_every_source_of_one_call_together_and_names_the_unknown():
    cuda = "torch::Tensor f(torch::Tensor x) { return x; }"
    good = f"from torch.utils.cpp_extension import load_inline\nm = load_inline(name='m', cpp_sources='torch::Tensor " \
           f"f(torch::Tensor x);', cuda_sources={cuda!r}, functions=['f'])\n"
    assert first_violation(good) is None
    bad = good.replace("return x;", "py::exec(\\'x\\'); return x;")
    assert "py::exec" in (first_violation(bad) or "")
    hidden = "from torch.utils.cpp_extension import load_inline\nm = load_inline(name='m', cpp_sources=make(), functions=['f'])\n"
    assert "not text the lint can read" in (first_violation(hidden) or "")


def test_a_source_list_is_read_element_by_element():
    head = "from torch.utils.cpp_extension import load_inline\n"
    assert "not text the lint can read" in (first_violation(
        head + "m = load_inline(name='m', cpp_sources=['int f() { return 1; }', make()], functions=['f'])\n") or "")
    assert first_violation(head + "srcs = ['int f() { return 1; }']\n"
                                  "m = load_inline(name='m', cpp_sources=srcs, functions=['f'])\n") is None


# review36: a name is the source's own only where it is in scope. `statvfs` stands for any C library function
# no list names; the Python C API is refused as a name even where declared.
@pytest.mark.parametrize(("source", "named"), [
    ("int unused(int statvfs) { return statvfs; }\nvoid g() { statvfs(\"/\"); }", "statvfs"),
    ("#define NEVER_USED(statvfs, fgets) 0\nvoid g() { statvfs(\"/\"); }", "statvfs"),
    ("void g() { statvfs(\"/\"); int statvfs = 0; }", "statvfs"),
    ("void g() { for (int statvfs = 0; statvfs < 1; ++statvfs) {} statvfs(\"/\"); }", "statvfs"),
    ("void g() { auto f = [](int statvfs) { return statvfs; }; statvfs(\"/\"); }", "statvfs"),
    ("template <int statvfs> int t() { return statvfs; }\nvoid g() { statvfs(\"/\"); }", "statvfs"),
    ("struct S { int statvfs() { return 0; } };\nvoid g() { statvfs(\"/\"); }", "statvfs"),
    ("void g() { { int statvfs = 0; } statvfs(\"/\"); }", "statvfs"),
    ("int proto(int statvfs);\nint proto(int x) { return x; }\nvoid g() { statvfs(\"/\"); }", "statvfs"),
    # a macro's body means what it means where it is expanded, not where it is defined
    ("void u(int statvfs) {\n#define OPEN_IT statvfs(\"/\")\n}\nvoid g() { OPEN_IT; }", "statvfs"),
    ("void u(int statvfs) {\n#define INNER statvfs(\"/\")\n#define OUTER(statvfs) INNER\n}\nvoid g() { OUTER(1); }",
     "statvfs"),
    # a macro's name is its own from its #define to its #undef, under its #if branch
    ("#define statvfs(x) 0\n#undef statvfs\nvoid g() { statvfs(\"/\"); }", "statvfs"),
    ("void g() { statvfs(\"/\"); }\n#define statvfs(x) 0\n", "statvfs"),
    ("void g() {\n#if 0\nint statvfs = 0;\n#endif\nstatvfs(\"/\");\n}", "statvfs"),
    # brackets a macro or a left-out #if branch supplies would move code into another block than the scan sees
    ("#define CLOSE }\n#define OPEN {\nvoid u(int statvfs) { CLOSE int g() { return statvfs(\"/\"); } void h() OPEN }",
     "bracket"),
    ("void u(int statvfs) {\n#if 0\n{\n#endif\n}\nint g() { return statvfs(\"/\"); }\n#if 0\n}\n#endif\n", "bracket"),
    ("void g() {\n#if 1\n", "#if"),
    # the C API is refused even as a name of its own; the 64-bit and unlocked stdio names as declarations
    ("int PyRun_SimpleString(const char* s) { return 0; }\nvoid g() { PyRun_SimpleString(\"x\"); }",
     "PyRun_SimpleString"),
    ("void g(int _PyObject_Call) {}", "_PyObject_Call"),
    ("int fopen64(int x) { return x; }", "fopen64"),
    ("struct fgets { int a; };", "fgets"),
    ("#define popen(x) 0\n", "popen"),
])
def test_a_name_is_own_only_where_it_is_in_scope(source, named):
    why = first_unknown(source)
    assert why is not None and named in why, why


SCOPED_HONEST = r'''
#include <torch/extension.h>
#define IDX(r, c) ((r) * cols + (c))
#define CUDA_CHECK(call) do { cudaError_t err = call; if (err != cudaSuccess) { printf("%s\n", cudaGetErrorString(err)); } } while (0)
#ifndef TILE
#define TILE 16
#endif
template <typename T, int N>
struct Buf { T v[N]; __device__ T at(int i) const { return v[i]; } };
__global__ void k(float* x, int rows, int cols) {
    int r = blockIdx.x;
#if __CUDA_ARCH__ >= 800
    float scale = 2.f;
#else
    float scale = 1.f;
#endif
    for (int c = threadIdx.x; c < cols; c += blockDim.x) x[IDX(r, c)] *= 2.f;
    __shared__ float tile[TILE];
    if (int q = r) { tile[0] = q; }
    int stat = 0, access = 1, select = 2;
    x[0] += stat + access + select;
}
struct Runner {
    int calls;
    Runner() : calls(0) {}
    void run(torch::Tensor x) { calls++; k<<<x.size(0), 256>>>(x.data_ptr<float>(), x.size(0), x.size(1)); }
};
torch::Tensor f(torch::Tensor x) {
    Runner runner;
    runner.run(x);
    CUDA_CHECK(cudaGetLastError());
    auto twice = [&](int n) -> int { return n * 2; };
    return x * twice(1);
}
'''


def test_scoped_names_in_honest_code_pass():
    # a macro's body may name the locals where it is expanded; locals may take libc's names (they hide them)
    assert first_unknown(SCOPED_HONEST) is None


@pytest.mark.parametrize("expression", ["bool b = not statvfs;", "bool b = x && statvfs;", "auto r = x & statvfs;",
                                        "bool b = p > statvfs;", "auto q = AMP statvfs;"])
def test_an_expression_is_no_declaration(expression):
    source = f"#define AMP &\nvoid g(torch::Tensor x, int p) {{ {expression} statvfs(\"/\", 0); }}"
    why = first_unknown(source)
    assert why is not None and "statvfs" in why, why


def test_a_function_returning_a_struct_is_no_class_body():
    why = first_unknown("struct S { int a; };\nstruct S make() { statvfs(\"/\", 0); int statvfs = 0; return S{statvfs}; }")
    assert why is not None and "statvfs" in why, why


# review37/38: a denied family is refused by the parts of its names, not only its whole names; the headers under an
# allowed tree that bring what torch/extension.h does not (and reaches outside) are refused, as is a path that steps out.
@pytest.mark.parametrize(("body", "named"), [
    ('std::basic_ifstream<char> f("/etc/passwd");', "basic_ifstream"),
    ('std::basic_ofstream<char> f("/tmp/x");', "basic_ofstream"),
    ('std::basic_fstream<char> f("/tmp/x");', "basic_fstream"),
    ('std::wifstream f("/x");', "wifstream"),
    ('std::wofstream f("/x");', "wofstream"),
    ('std::wfstream f("/x");', "wfstream"),
    ("std::basic_filebuf<char> b;", "basic_filebuf"),
    ("std::wfilebuf b;", "wfilebuf"),
    ("std::__basic_file<char> b;", "__basic_file"),
    ("__gnu_cxx::stdio_filebuf<char> b(3, std::ios::in);", "__gnu_cxx"),
    ('namespace s = std; s::basic_ifstream<char> f("/x");', "basic_ifstream"),
    ("std::wstring s; std::getline(std::wcin, s);", "wcin"),
    ('int v; std::scanf("%d", &v);', "scanf"),
    ("std::getchar();", "getchar"),
    ('at::from_file_out(x, "/etc/passwd", false, 16);', "from_file_out"),
    ('at::from_file_outf("/x", true, 16, x);', "from_file_outf"),
    ('at::_ops::from_file_out::call("/x", true, 1, x);', "from_file_out"),
    ('at::MapAllocator m("/etc/passwd", 0, 16);', "MapAllocator"),
    ('at::RefcountedMapAllocator m("/x", 0, 16);', "RefcountedMapAllocator"),
    ('at::DynamicLibrary lib("libc.so.6");', "DynamicLibrary"),
    ("at::intraop_launch([]{});", "intraop_launch"),
    ('std::experimental::filesystem::remove("/x");', "filesystem"),
])
def test_a_denied_family_is_refused_by_the_parts_of_its_names(body, named):
    why = first_unknown(WRAPPER.format(body))
    assert why is not None and named in why, why


@pytest.mark.parametrize(("source", "named"), [
    ('using namespace std;\nvoid g() { basic_ifstream<char> f("/x"); }', "basic_ifstream"),
    ('using namespace std;\nvoid g() { wifstream f("/x"); }', "wifstream"),
    ('namespace mine { using namespace std; }\nvoid g() { mine::basic_ifstream<char> f("/x"); }', "basic_ifstream"),
    ("using std::basic_filebuf;\n", "basic_filebuf"),
    ("struct B : std::basic_filebuf<char> {};\n", "basic_filebuf"),
    ('#define FS basic_ifstream\nvoid g() { std::FS<char> f("/x"); }', "basic_ifstream"),
])
def test_the_stream_templates_are_refused_however_they_are_reached(source, named):
    why = first_unknown(source)
    assert why is not None and named in why, why


@pytest.mark.parametrize("header", [
    "ATen/cuda/tunable/Tunable.h", "ATen/cuda/tunable/TunableGemm.h", "ATen/hip/tunable/Tunable.h",
    "ATen/DynamicLibrary.h", "ATen/MapAllocator.h", "c10/util/FileSystem.h", "c10/util/signal_handler.h",
    "ATen/../../../../usr/include/c++/12/fstream", "cuda/../../../usr/include/dlfcn.h", "ATen/./cuda/tunable/Tunable.h",
    "./ATen/ATen.h", "c10/util/../util/FileSystem.h",
    # torch's kernels by backend, past the dispatcher (review39): their work would record no op
    "ATen/CPUFunctions.h", "ATen/CUDAFunctions.h", "ATen/NativeFunctions.h", "ATen/ops/softmax_cpu_dispatch.h",
    "ATen/ops/silu_backward_native.h", "ATen/native/cuda/Loops.cuh",
])
def test_headers_past_what_kernels_need_are_refused(header):
    why = first_unknown(f"#include <{header}>\n")
    assert why is not None and header in why, why


def test_honest_near_misses_pass():
    # the candidate's own names may hold the parts (only a member of a namespace is judged by them), and the
    # headers kernels include stay allowed
    headers = "".join(f"#include <{h}>\n" for h in (
        "torch/extension.h", "ATen/ATen.h", "ATen/cuda/CUDAContext.h", "ATen/cuda/CUDAEvent.h", "ATen/cuda/Atomic.cuh",
        "ATen/Dispatch.h", "c10/cuda/CUDAGuard.h", "c10/util/Half.h", "cuda/std/cstdint"))
    source = headers + """
struct Cfg { int filebuf_bytes; };
static int load_from_file_cache(int fstream_like) { return fstream_like; }
torch::Tensor f(torch::Tensor x, int filebuffer_size) {
    Cfg cfg; cfg.filebuf_bytes = 1;
    int from_file_count = load_from_file_cache(filebuffer_size);
    std::wcout << from_file_count << std::endl;
    return x * (cfg.filebuf_bytes + from_file_count);
}
"""
    assert first_unknown(source) is None


@pytest.mark.parametrize("call", ["at::cpu::_softmax(x, 1, false)", "at::native::silu_backward(g, x)",
                                  "at::meta::softmax(x, 1)", "at::compositeexplicitautograd::relu(x)"])
def test_torchs_kernels_past_the_dispatcher_are_refused(call):
    """review39: torch's kernel called by backend runs its work where the op records can't see it."""
    why = first_unknown(f"#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x, torch::Tensor g) {{ return {call}; }}\n")
    assert why is not None and call.split("(")[0].rsplit("::", 1)[0].split("::")[1] in why, why
    assert first_unknown("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) "
                         "{ return torch::softmax(x.cpu(), 1).to(at::kCPU); }\n") is None
