"""Special functions for `func.call @__uniorch_math_<fn>_<f32|f64>` in linalg bodies (uniorch/ir/special.py).

Where the vendor math library has the function, the template calls `libdevice.<name>`:
`triton.language.extra.libdevice`, which Triton resolves per target at JIT time (CUDA libdevice,
ROCm ocml), so the kernel gets the same correctly rounded-ish vendor code PyTorch's own GPU kernels
use. Generated modules use the name `libdevice` without importing it, as they do `jit`: the loader
binds it (uniorch/runtime/loader.py), to Triton's module for GPUs and, for the CPU interpreter, which
cannot run extern calls, to the bridge in backends/interpret/libdevice.py.

Where libdevice has no function (digamma, trigamma, i0e, i1e, ndtri — ROCm's ocml has no normcdfinv —,
spherical_bessel_j0, igamma/igammac: special_igamma.py) the helper is a port of PyTorch's own implementation in
aten/src/ATen/native/Math.h (Cephes), written with core `tl` ops only and unrolled (loops with a
data-dependent trip count become a fixed number of masked steps), so the interpreter checks the
same code the GPU runs. Coefficients are the double-precision Cephes tables; in fp32 the extra
terms cost a few FMAs and change nothing, and fp64 keeps full precision.

SPECIAL maps `<fn>_<type>` to a template over the call's operands; only f32 and f64 appear (the
rewrite computes f16/bf16 in fp32). A name missing here is never rewritten, so the op keeps falling
back to PyTorch with torch-mlir's reason.
"""
from __future__ import annotations

import math

from .cephes import chbevl as _chbevl, horner as _horner
from .special_igamma import HELPERS as _IGAMMA_HELPERS, IGAM_CONST as _IGAM_CONST

PI = "3.141592653589793"

_I0E_A = (
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
    1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
    9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
    1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
    -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
    1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
    1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1,
)
_I0E_B = (
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
    3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
    -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
    -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
    3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
    2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1,
)
_I1E_A = (
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
    -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
    3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
    -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
    9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
    -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
    4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
    -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
    2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
    -1.76416518357834055153E-1, 2.52587186443633654823E-1,
)
_I1E_B = (
    7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
    -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
    -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
    4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
    3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
    -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
    -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
    7.78576235018280120474E-1,
)
_NDTRI_P0 = (
    -5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
    1.39312609387279679503E1, -1.23916583867381258016E0,
)
_NDTRI_Q0 = (
    1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
    -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
    1.59056225126211695515E1, -1.18331621121330003142E0,
)
_NDTRI_P1 = (
    4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1, 4.40805073893200834700E1,
    1.46849561928858024014E1, 2.18663306850790267539E0, -1.40256079171354495875E-1,
    -3.50424626827848203418E-2, -8.57456785154685413611E-4,
)
_NDTRI_Q1 = (
    1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
    1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
    -3.80806407691578277194E-2, -9.33259480895457427372E-4,
)
_NDTRI_P2 = (
    3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0, 1.33303460815807542389E0,
    2.01485389549179081538E-1, 1.23716634817820021358E-2, 3.01581553508235416007E-4,
    2.65806974686737550832E-6, 6.23974539184983293730E-9,
)
_NDTRI_Q2 = (
    1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
    2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
    2.89247864745380683936E-6, 6.79019408009981274425E-9,
)

_K0_A = (
    1.374465435613523e-16, 4.25981614279661e-14, 1.0349695257633842e-11, 1.904516377220209e-09,
    2.5347910790261494e-07, 2.286212103119452e-05, 0.001264615411446926, 0.0359799365153615,
    0.3442898999246285, -0.5353273932339028,
)
_K0_B = (
    5.300433772686263e-18, -1.6475804301524212e-17, 5.2103915050390274e-17, -1.678231096805412e-16,
    5.512055978524319e-16, -1.848593377343779e-15, 6.3400764774050706e-15, -2.2275133269916698e-14,
    8.032890775363575e-14, -2.9800969231727303e-13, 1.140340588208475e-12, -4.514597883373944e-12,
    1.8559491149547177e-11, -7.957489244477107e-11, 3.577397281400301e-10, -1.69753450938906e-09,
    8.574034017414225e-09, -4.660489897687948e-08, 2.766813639445015e-07, -1.8317555227191195e-06,
    1.39498137188765e-05, -0.00012849549581627802, 0.0015698838857300533, -0.0314481013119645,
    2.4403030820659555,
)
_K1_A = (
    -7.023863479386288e-18, -2.427449850519366e-15, -6.666901694199329e-13, -1.4114883926335278e-10,
    -2.213387630734726e-08, -2.4334061415659684e-06, -0.0001730288957513052, -0.006975723859639864,
    -0.12261118082265715, -0.3531559607765449, 1.5253002273389478,
)
_K1_B = (
    -5.756744483665017e-18, 1.7940508731475592e-17, -5.689462558442859e-17, 1.838093544366639e-16,
    -6.057047248373319e-16, 2.038703165624334e-15, -7.019837090418314e-15, 2.4771544244813043e-14,
    -8.976705182324994e-14, 3.3484196660784293e-13, -1.2891739609510289e-12, 5.13963967348173e-12,
    -2.1299678384275683e-11, 9.218315187605006e-11, -4.1903547593418965e-10, 2.015049755197033e-09,
    -1.0345762465678097e-08, 5.7410841254500495e-08, -3.5019606030878126e-07, 2.406484947837217e-06,
    -1.936197974166083e-05, 0.00019521551847135162, -0.002857816859622779, 0.10392373657681724,
    2.7206261904844427,
)
_AIRY_AN = (
    0.346538101525629, 12.007595273964581, 76.27960536152345, 168.08922493463058, 159.75639135016442,
    70.53609068404442, 14.026469116338967, 1.0,
)
_AIRY_AD = (
    0.5675945326387702, 14.75625625848472, 84.51389701414746, 177.31808814540045, 164.2346928715297,
    71.47784008255756, 14.095913560783403, 1.0,
)
_AIRY_AFN = (
    -0.1316963234183318, -0.6264565444319123, -0.6931580360369335, -0.2797799815451191,
    -0.04919001326095003, -0.004062659235948854, -0.0001592764962392621, -2.776491081552329e-06,
    -1.6778769848911465e-08,
)
_AIRY_AFD = (
    13.356042070655324, 32.682503279522464, 26.736704094149957, 9.187074029072596, 1.4752914677166642,
    0.11568717379518804, 0.004402916416152112, 7.547203482874142e-05, 4.5185009297058035e-07,
)
_AIRY_AGN = (
    0.01973399320916857, 0.39110302961568827, 1.0657989759959559, 0.9391692298166502, 0.35146565610554764,
    0.06338889196289255, 0.005858041130483885, 0.000282851600836737, 6.98793669997261e-06,
    8.117892395543892e-08, 3.415517847659236e-10,
)
_AIRY_AGD = (
    9.30892908077442, 19.835292871831214, 15.564662893286462, 5.476860694229755, 0.9542936116189619,
    0.08645808263523921, 0.004126565238242226, 0.00010125908511650914, 1.1716673321441352e-06,
    4.9183457006293e-09,
)
_DIGAMMA_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)


HELPERS = {
    "_digamma": f'''@jit
def _digamma(x):
    # ATen calc_digamma: reflection below 0, recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10
    # (at most 10 steps once x > 0: unrolled, masked), asymptotic series from there
    neg = x < 0
    xr = tl.where(neg, 1.0 - x, x)
    result = tl.full(x.shape, 0.0, x.dtype)
    for _ in tl.static_range(10):
        m = xr < 10.0
        result = tl.where(m, result - 1.0 / tl.where(m, xr, 1.0), result)
        xr = tl.where(m, xr + 1.0, xr)
    z = 1.0 / (xr * xr)
    y = tl.where(xr < 1.0e17, z * ({_horner("z", _DIGAMMA_A)}), 0.0)
    out = result + tl.log(xr) - 0.5 / xr - y
    out = tl.where(xr == 10.0, result + 2.25175258906672110764, out)
    # pi / tan(pi * r), r the fractional part of x, in fp64 as ATen does for both precisions
    r = x.to(tl.float64)
    r = r - tl.where(r < 0, -tl.floor(-r), tl.floor(r))
    t = ({PI} / (tl.sin({PI} * r) / tl.cos({PI} * r))).to(x.dtype)
    out = tl.where(neg, out - t, out)
    out = tl.where(neg & (x == tl.floor(x)), float("nan"), out)  # poles: NaN, as ATen and SciPy
    return tl.where(x == 0, tl.where(1.0 / x > 0, float("-inf"), float("inf")), out)
''',
    "_trigamma": f'''@jit
def _trigamma(x):
    # ATen calc_trigamma: reflection below 1/2, six recurrence steps, asymptotic series
    neg = x < 0.5
    s = tl.sin({PI} * x)
    result = tl.where(neg, -({PI} * {PI}) / (s * s), 0.0)
    xr = tl.where(neg, 1.0 - x, x)
    for _ in tl.static_range(6):
        result = result + 1.0 / (xr * xr)
        xr = xr + 1.0
    ixx = 1.0 / (xr * xr)
    result = result + (1.0 + 1.0 / (2.0 * xr) + ixx * (1.0 / 6.0 - ixx * (1.0 / 30.0 - ixx * (1.0 / 42.0)))) / xr
    return tl.where(neg, -result, result)
''',
    "_i0e": f'''@jit
def _i0e(x):
    # ATen calc_i0e: Chebyshev expansions on [0, 8] and (8, inf) of exp(-|x|) I0(x)
    ax = tl.abs(x)
    ya = ax * 0.5 - 2.0
    {_chbevl("ya", _I0E_A, "a")}
    yb = 32.0 / tl.where(ax == 0, 1.0, ax) - 2.0
    {_chbevl("yb", _I0E_B, "b")}
    return tl.where(ax <= 8.0, a, b / tl.sqrt(ax))
''',
    "_i1e": f'''@jit
def _i1e(x):
    # ATen calc_i1e: Chebyshev expansions on [0, 8] and (8, inf) of exp(-|x|) I1(x), odd
    ax = tl.abs(x)
    ya = ax * 0.5 - 2.0
    {_chbevl("ya", _I1E_A, "a")}
    yb = 32.0 / tl.where(ax == 0, 1.0, ax) - 2.0
    {_chbevl("yb", _I1E_B, "b")}
    out = tl.where(ax <= 8.0, a * ax, b / tl.sqrt(ax))
    return tl.where(x < 0, -out, out)
''',
    "_ndtri": f'''@jit
def _ndtri(y0):
    # ATen calc_ndtri (Cephes): rational approximation around 1/2, in z = sqrt(-2 log y) in the tails
    flip = y0 > 1.0 - 0.13533528323661269189
    y = tl.where(flip, 1.0 - y0, y0)
    yc = y - 0.5
    y2 = yc * yc
    central = (yc + yc * (y2 * ({_horner("y2", _NDTRI_P0)}) / ({_horner("y2", _NDTRI_Q0)}))) * 2.50662827463100050242
    ys = tl.where((y > 0) & (y < 1), y, 0.5)
    x = tl.sqrt(-2.0 * tl.log(ys))
    x0 = x - tl.log(x) / x
    z = 1.0 / x
    x1 = tl.where(x < 8.0, z * ({_horner("z", _NDTRI_P1)}) / ({_horner("z", _NDTRI_Q1)}),
                  z * ({_horner("z", _NDTRI_P2)}) / ({_horner("z", _NDTRI_Q2)}))
    tail = tl.where(flip, x0 - x1, x1 - x0)
    out = tl.where(y > 0.13533528323661269189, central, tail)
    out = tl.where(y0 == 0, float("-inf"), out)
    out = tl.where(y0 == 1, float("inf"), out)
    return tl.where((y0 < 0) | (y0 > 1) | (y0 != y0), float("nan"), out)
''',
    "_spherical_bessel_j0": '''@jit
def _spherical_bessel_j0(x):
    # ATen spherical_bessel_j0_forward: sin(x)/x, its Taylor series below 1/2, 0 at +-inf
    z = x * x
    small = 1.0 + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362880.0
            + z * (-1.0 / 39916800.0 + z * (1.0 / 6227020800.0))))))
    big = tl.sin(x) / tl.where(x == 0, 1.0, x)
    out = tl.where(tl.abs(x) < 0.5, small, big)
    return tl.where(tl.abs(x) == float("inf"), 0.0, out)
''',
}


def _bessel_k(name: str, a, b, order: int, scaled: bool) -> str:
    """ATen modified_bessel_k{0,1}_forward / scaled_modified_bessel_k{0,1}_forward: Chebyshev
    series in x*x - 2 (with the log(x/2) I_n(x) term) up to 2, in 8/x - 2 above."""
    i_n = "libdevice.cyl_bessel_i0(xs)" if order == 0 else "libdevice.cyl_bessel_i1(xs)"
    small = f"a - tl.log(0.5 * xs) * {i_n}" if order == 0 else f"tl.log(0.5 * xs) * {i_n} + a / xs"
    if scaled:
        small, big = f"({small}) * tl.exp(xs)", "b / tl.sqrt(xb)"
    else:
        big = "tl.exp(-xb) * b / tl.sqrt(xb)"
    return f'''@jit
def {name}(x):
    xs = tl.where((x > 0) & (x <= 2.0), x, 1.0)
    t = xs * xs - 2.0
    {_chbevl("t", a, "a")}
    xb = tl.where(x > 2.0, x, 4.0)
    u = 8.0 / xb - 2.0
    {_chbevl("u", b, "b")}
    out = tl.where(x <= 2.0, {small}, {big})
    out = tl.where(x == 0, float("inf"), out)
    return tl.where((x < 0) | (x != x), float("nan"), out)
'''


def _zeta_source() -> str:
    """ATen zeta (Cephes Hurwitz zeta), in fp64 as ATen's CPU kernel computes it for float too.
    The direct sum runs at least 9 terms and on until q + terms > 9 (more only for q < 0), then
    an Euler-Maclaurin tail of up to 12 terms; both stop per element once converged (masks)."""
    step = '''active = ~done
        a = tl.where(active, a + 1.0, a)
        bn = _powf(a, -xd)
        b = tl.where(active, bn, b)
        s = tl.where(active, s + bn, s)
        conv = active & (-MACHEP * s < bn) & (bn < MACHEP * s)
        early = early | conv
        done = done | conv'''
    tail = []
    for c in _ZETA_A:
        tail += ["aa = aa * (xd + k)", "b = b / w", f"t = aa * b / {c!r}", "s2 = tl.where(fin, s2, s2 + t)",
                 "fin = fin | (tl.abs(t / s2) < MACHEP)", "k = k + 1.0", "aa = aa * (xd + k)", "b = b / w", "k = k + 1.0"]
    tail_text = "\n    ".join(tail)
    return f'''@jit
def _zeta(x, q):
    MACHEP = 1.11022302462515654042e-16
    xd, qd = tl.broadcast(x.to(tl.float64), q.to(tl.float64))
    pole = (qd <= 0) & (qd == tl.floor(qd))
    # special values in ATen's order of tests: x == 1, x < 1, poles of q, q <= 0 with x not integral
    bad_x = xd < 1.0
    bad_q = (qd <= 0) & (xd != tl.floor(xd))
    done = (xd == 1.0) | bad_x | pole | bad_q
    early = done
    s = _powf(qd, -xd)
    a = qd
    b = tl.full(s.shape, 0.0, tl.float64)
    for _ in tl.static_range(9):
        {step}
    # q < 0: terms until q + terms > 9, as ATen (a bounded loop: a lane left is NaN, never wrong)
    more = ~done & (a <= 9.0)
    n = 0
    # (tl.reduce with a helper combiner: tl.max is a triton.jit function the interpreter cannot call)
    while (tl.reduce(more.to(tl.int32), None, _max_combine) > 0) & (n < 1000000):
        {step}
        more = ~done & (a <= 9.0)
        n += 1
    w = a
    s2 = s + b * w / (xd - 1.0) - 0.5 * b
    aa = tl.full(s.shape, 1.0, tl.float64)
    k = tl.full(s.shape, 0.0, tl.float64)
    fin = early
    {tail_text}
    out = tl.where(early, s, s2)
    out = tl.where(more | bad_q, float("nan"), out)
    out = tl.where(pole, float("inf"), out)
    out = tl.where(bad_x, float("nan"), out)
    return tl.where(xd == 1.0, float("inf"), out)
'''


# frexp by the bits: exponent field read off (subnormals scaled into the normal range first),
# mantissa with the exponent field set to that of [0.5, 1); 0, +-inf and NaN give (x, 0) as in C
for _fn, _ity, _fty, _mbits, _bias, _tiny, _scale, _sbits in (
        ("32", "tl.int32", "tl.float32", 23, 126, "1.1754943508222875e-38", "16777216.0", 24),
        ("64", "tl.int64", "tl.float64", 52, 1022, "2.2250738585072014e-308", "18014398509481984.0", 54)):
    _mask = ~(0x7FF << _mbits) if _fn == "64" else ~(0xFF << _mbits)
    _emask = 0x7FF if _fn == "64" else 0xFF
    HELPERS[f"_frexp{_fn}"] = f'''@jit
def _frexp{_fn}(x):
    sub = tl.abs(x) < {_tiny}
    xs = tl.where(sub, x * {_scale}, x)
    bits = xs.to({_ity}, bitcast=True)
    e = ((bits >> {_mbits}) & {_emask}) - {_bias} - tl.where(sub, {_sbits}, 0)
    m = ((bits & {_mask}) | ({_bias} << {_mbits})).to({_fty}, bitcast=True)
    special = (x == 0) | (tl.abs(x) == float("inf")) | (x != x)
    return tl.where(special, x, m), tl.where(special, 0, e).to(tl.int32)
'''
# ATen airy_ai_forward (Cephes airy): asymptotic forms below -2.09 and from 2.09, the power
# series between (at most 12 terms for |x| < 2.09; a term below `eps` of the sum stops it, masked)
_AIRY_SERIES = "\n    ".join(["m = tl.where(go, m * z, m)", "k = tl.where(go, k + 1.0, k)", "m = tl.where(go, m / k, m)",
                               "n = tl.where(go, n * z, n)", "k = tl.where(go, k + 1.0, k)", "n = tl.where(go, n / k, n)",
                               "m = tl.where(go, m / k, m)", "f = tl.where(go, f + m, f)", "k = tl.where(go, k + 1.0, k)",
                               "n = tl.where(go, n / k, n)", "g = tl.where(go, g + n, g)",
                               "go = go & (tl.abs(m / f) > eps)"])
HELPERS["_airy_ai"] = f'''@jit
def _airy_ai(x, eps):
    xn = tl.where(x < -2.09, x, -3.0)
    zn = 1.0 / (-2.0 * xn * tl.sqrt(-xn) / 3.0)
    zz = zn * zn
    afn = {_horner("zz", _AIRY_AFN)}
    afd = {_horner("zz", _AIRY_AFD)}
    agn = {_horner("zz", _AIRY_AGN)}
    agd = {_horner("zz", _AIRY_AGD)}
    t = -2.0 * xn * tl.sqrt(-xn) / 3.0 + 0.25 * {PI}
    neg = 5.64189583547756286948e-01 / tl.sqrt(tl.sqrt(-xn)) * (tl.sin(t) * (1.0 + zz * afn / afd) - tl.cos(t) * (zn * agn / agd))
    xp = tl.where(x >= 2.09, x, 3.0)
    zeta = 2.0 * xp * tl.sqrt(xp) / 3.0
    iz = 1.0 / zeta
    an = {_horner("iz", _AIRY_AN)}
    ad = {_horner("iz", _AIRY_AD)}
    pos = 5.64189583547756286948e-01 * (an / ad) / (2.0 * tl.sqrt(tl.sqrt(xp)) * tl.exp(zeta))
    xs = tl.where((x >= -2.09) & (x < 2.09), x, 0.0)
    f = tl.full(x.shape, 1.0, x.dtype)
    g = xs + 0.0
    k = f + 0.0
    m = f + 0.0
    n = xs + 0.0
    z = xs * xs * xs
    go = f == 1.0
    for _ in tl.static_range(12):
        {_AIRY_SERIES.replace(chr(10) + "    ", chr(10) + "        ")}
    series = 0.355028053887817239260 * f - 0.258819403792806798405 * g
    series = tl.where(x != x, x, series)
    out = tl.where(x < -2.09, neg, tl.where(x >= 2.09, pos, series))
    out = tl.where(x > 103.892, 0.0, out)
    return tl.where(tl.abs(x) == float("inf"), float("nan"), out)
'''
HELPERS["_max_combine"] = '''@jit
def _max_combine(a, b):
    return tl.maximum(a, b)
'''
HELPERS["_k0"] = _bessel_k("_k0", _K0_A, _K0_B, 0, False)
HELPERS["_k1"] = _bessel_k("_k1", _K1_A, _K1_B, 1, False)
HELPERS["_k0e"] = _bessel_k("_k0e", _K0_A, _K0_B, 0, True)
HELPERS["_k1e"] = _bessel_k("_k1e", _K1_A, _K1_B, 1, True)
HELPERS["_zeta"] = _zeta_source()


def _polynomial(name: str, first: str, step: str, cases: list, shifted: bool = False, limit: bool = False) -> str:
    """ATen's orthogonal polynomials (Math.h *_polynomial_*_forward): p_n by its three-term
    recurrence from p_0 = 1, p_1 = `first`, `step` giving p_{k+1} from p (p_{k-1}), q (p_k) and the
    float k; `cases` [(condition, value)] in ATen's order of tests, the first true one wins. n is
    truncated to an integer as ATen's cast to int64 does (NaN, inf and n >= 2^63 become negative
    there, on x86, so 0 here). The loop runs to the block's largest n, masked per element, and
    only for elements no closed form answers."""
    y = "(x + x - 1.0)" if shifted else "x"
    lines = [
        f"y = {y}",
        "nt = tl.where(n < 0, -tl.floor(-n), tl.floor(n))",
        "nn = tl.where((n != n) | (tl.abs(n) >= 9.2e18), -1.0, nt)",
        "even = (nn - 2.0 * tl.floor(nn * 0.5)) == 0",
    ]
    if limit:
        lines.append("nn = tl.where(nn > lim, float(\"nan\"), nn)")
    out_cases = [("nn < 0", "0.0")] + cases + [("nn == 0", "1.0"), ("nn == 1", first)]
    if limit:
        out_cases.insert(1, ("nn != nn", "float(\"nan\")"))
    closed = " | ".join(f"({c})" for c, _ in out_cases)
    lines += [
        f"rec = ~({closed})",
        "p = tl.full(y.shape, 1.0, y.dtype)",
        f"q = p * 0.0 + {first}",
        "top = tl.reduce(tl.where(rec, nn, 0.0), None, _max_combine)",
        "k = tl.full([], 1.0, y.dtype)",
        "while k < top:",
        "    act = rec & (k < nn)",
        f"    r = {step}",
        "    p, q = tl.where(act, q, p), tl.where(act, r, q)",
        "    k = k + 1.0",
        "out = q",
    ]
    for c, v in reversed(out_cases):
        lines.append(f"out = tl.where({c}, {v}, out)")
    lines.append("return out")
    args = "x, n, lim" if limit else "x, n"
    return f"@jit\ndef {name}({args}):\n    " + "\n    ".join(lines) + "\n"


def _chebyshev(kind: str, shifted: bool) -> str:
    """Chebyshev T/U/V/W (shifted: of 2x - 1), with ATen's closed forms at y = +-1 and its
    trigonometric form for |y| < 1 above an n threshold (which differs per kind and shift)."""
    one, mone = ("x == 1.0", "x == 0.0") if shifted else ("y == 1.0", "y == -1.0")
    n1, n21 = "(nn + 1.0)", "(nn + nn + 1.0)"
    t = "libdevice.acos(y)"
    if kind == "t":
        thr = 6
        cases = [(one, "1.0"), (mone, "tl.where(even, 1.0, -1.0)")]
        trig = f"tl.cos(nn * {t})"
        first = "y"
    elif kind == "u":
        thr = 6 if shifted else 8
        cases = [(one, n1), (mone, f"tl.where(even, {n1}, -{n1})")]
        trig = (f"tl.where(tl.sin({t}) != 0, tl.sin({n1} * {t}) / tl.sin({t}), "
                f"{n1} * tl.cos({n1} * {t}) / y)")
        first = "y + y"
    elif kind == "v":
        thr = 6 if shifted else 8
        cases = [(one, "1.0"), (mone, f"tl.where(even, {n21}, -{n21})")]
        trig = (f"tl.where(tl.sin({t} / 2.0) != 1.0, tl.cos((nn + 0.5) * {t}) / tl.cos({t} / 2.0), "
                f"tl.where(even, {n21}, -{n21}))")
        first = "y + y - 1.0"
    else:
        thr = 4 if shifted else 8
        cases = [(one, n21), (mone, "tl.where(even, 1.0, -1.0)")]
        trig = (f"tl.where(tl.cos({t} / 2.0) != 1.0, tl.sin((nn + 0.5) * {t}) / tl.sin({t} / 2.0), "
                f"tl.where(y > 0, {n21}, tl.where(even, 1.0, -1.0)))")
        first = "y + y + 1.0"
    cases.append((f"(nn > {thr}) & (tl.abs(y) < 1.0)", trig))
    name = f"_{'shifted_' if shifted else ''}chebyshev_{kind}"
    # one rounding, as the fused multiply-add compilers contract ATen's `(x + x) * q - p` into (it
    # decides where the recurrence overflows near the top of the float range)
    return _polynomial(name, first, "tl.fma(y + y, q, -p)", cases, shifted)


for _kind in "tuvw":
    for _shifted in (False, True):
        HELPERS[f"_{'shifted_' if _shifted else ''}chebyshev_{_kind}"] = _chebyshev(_kind, _shifted)
# Hermite: NaN above ATen's getHermitianLimit (128 for float, 512 for double), passed as `lim`
# (fused as compilers contract ATen's `(x + x) * q - k * p`: the terms nearly cancel near roots)
HELPERS["_hermite_h"] = _polynomial("_hermite_h", "x + x", "tl.fma(x + x, q, -((k + k) * p))", [], limit=True)
HELPERS["_hermite_he"] = _polynomial("_hermite_he", "x", "tl.fma(x, q, -(k * p))", [], limit=True)
HELPERS["_laguerre_l"] = _polynomial("_laguerre_l", "1.0 - x", "(((k + k) + (1.0 - x)) * q - k * p) / (k + 1.0)",
                                     [("tl.abs(x) == 0.0", "1.0")])
# (fused as compilers contract ATen's `(k + k + 1) * x * q - k * p`: one rounding decides where it overflows)
HELPERS["_legendre_p"] = _polynomial("_legendre_p", "x", "tl.fma((k + k + 1.0) * x, q, -(k * p)) / (k + 1.0)",
                                     [("tl.abs(x) == 1.0", "tl.where((x > 0) | even, 1.0, -1.0)")])

HELPERS.update(_IGAMMA_HELPERS)

_LIBDEVICE = {  # function -> libdevice name (fp32 and fp64 both exist for CUDA and ROCm)
    "lgamma": "lgamma", "erfc": "erfc", "erfinv": "erfinv", "erfcx": "erfcx", "i0": "cyl_bessel_i0",
    "i1": "cyl_bessel_i1", "bessel_j0": "j0", "bessel_j1": "j1", "bessel_y0": "y0", "bessel_y1": "y1",
    "hypot": "hypot", "nextafter": "nextafter",
}
_ARITY = {"hypot": 2, "nextafter": 2}
_HELPER_FNS = {"digamma": "_digamma", "polygamma_n0": "_digamma", "polygamma_n1": "_trigamma",
               "i0e": "_i0e", "i1e": "_i1e", "ndtri": "_ndtri", "spherical_bessel_j0": "_spherical_bessel_j0",
               "k0": "_k0", "k1": "_k1", "k0e": "_k0e", "k1e": "_k1e"}

SPECIAL: dict[str, str] = {}
for _ty in ("f32", "f64"):
    for _fn, _name in _LIBDEVICE.items():
        SPECIAL[f"{_fn}_{_ty}"] = f"libdevice.{_name}(" + ", ".join(f"{{{i}}}" for i in range(_ARITY.get(_fn, 1))) + ")"
    for _fn, _helper in _HELPER_FNS.items():
        SPECIAL[f"{_fn}_{_ty}"] = f"{_helper}({{0}})"
    # zeta in fp64 (see _zeta_source), rounded once to the result type
    SPECIAL[f"zeta_{_ty}"] = "_zeta({0}, {1}).to({T})"
    for _n in range(2, 31):  # ATen calc_polygamma: (-1)^(n+1) n! zeta(n + 1, x)
        _factor = (1.0 if _n % 2 else -1.0) * float(math.factorial(_n))
        SPECIAL[f"polygamma_n{_n}_{_ty}"] = f"({_factor!r} * _zeta(tl.full([], {_n + 1}.0, tl.float64), {{0}}).to({{T}}))"
    for _kind in "tuvw":
        SPECIAL[f"chebyshev_{_kind}_{_ty}"] = f"_chebyshev_{_kind}({{0}}, {{1}})"
        SPECIAL[f"shifted_chebyshev_{_kind}_{_ty}"] = f"_shifted_chebyshev_{_kind}({{0}}, {{1}})"
    _lim = "128.0" if _ty == "f32" else "512.0"
    SPECIAL[f"hermite_h_{_ty}"] = f"_hermite_h({{0}}, {{1}}, {_lim})"
    SPECIAL[f"hermite_he_{_ty}"] = f"_hermite_he({{0}}, {{1}}, {_lim})"
    SPECIAL[f"laguerre_l_{_ty}"] = "_laguerre_l({0}, {1})"
    SPECIAL[f"legendre_p_{_ty}"] = "_legendre_p({0}, {1})"
    SPECIAL[f"frexp_mantissa_{_ty}"] = f"_frexp{_ty[1:]}({{0}})[0]"
    SPECIAL[f"frexp_exponent_{_ty}"] = f"_frexp{_ty[1:]}({{0}})[1]"
    SPECIAL[f"airy_ai_{_ty}"] = "_airy_ai({0}, " + ("1.1920928955078125e-07" if _ty == "f32" else "2.220446049250313e-16") + ")"
    SPECIAL[f"igamma_{_ty}"] = f"_igamma({{0}}, {{1}}, {_IGAM_CONST[_ty]})"
    SPECIAL[f"igammac_{_ty}"] = f"_igammac({{0}}, {{1}}, True, {_IGAM_CONST[_ty]})"
    SPECIAL[f"isfinite_{_ty}"] = "tl.abs({0}) < float(\"inf\")"  # NaN compares false
# the sign bit itself (-0.0 and -NaN included), read as a signed integer of the same width
SPECIAL["signbit_f32"] = "({0}.to(tl.int32, bitcast=True) < 0)"
SPECIAL["signbit_f64"] = "({0}.to(tl.int64, bitcast=True) < 0)"
