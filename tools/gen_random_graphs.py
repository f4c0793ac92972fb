#!/usr/bin/env python3
"""Writes randomized gradix graph tests (C++ doctest sources) from a seed and a count.

    python3 tools/gen_random_graphs.py --seed 1 --count 200 OUT_0.cpp OUT_1.cpp ...

The graphs are spread over the output files in order (graph ids 0 .. count-1); meson
(tests/random/meson.build) runs this with the options `random_seed` and `random_count`.
Graph i depends only on (seed, i), not on the count or the number of files, so
`--seed S --only I` reprints graph I of seed S (to stdout) for a failure report.

What is random, and when
------------------------
Graph structure and static shapes are types, so they are drawn here, at build time: the
operations, their nesting (depth up to 6, deeper in the special families below, with shared
sub-expressions and parameters used more than once), every extent, which extents are static,
leaf layouts, which leaves are parameters and their gradient storage (dense/sparse, along
which axis), the number of indices of each index vector, ranges (start, stop, step),
reduction axes, permutations, reshape targets. Everything else comes from the run-time
seed (tests/random/ref.hpp: the --random-seed=N flag or GRADIX_RANDOM_SEED, default 1): leaf
values, the index values of index vectors (with at least one repeated index per vector of
two or more, or all distinct for `unique`), and the positions of at(j) / select.

Operation families: elementwise unary (neg, exp, log, sqrt, tanh, sigmoid, relu, abs,
square, pow with a scalar exponent, arithmetic and max/min with a scalar), binary (+ - * /
max min pow) with broadcasting (static extent 1 axes and missing leading axes, rank-0
operands), reductions (sum/mean/max over all axes or over chosen axes, negative axes,
keep_dims), index ops (gather with index vectors of several element types, unique(...),
ranges and slices with positive and negative steps, at(j), select, several axes at once
through E(...) on leaves and gx::index(e, ...)), views (transpose/permute, unsqueeze,
reshape, broadcast_to).

Special families: a fifth of the graphs (SPECIAL_SHARE; which ones, and which family, is
drawn from (seed, i) by a generator of its own, so the other graphs are exactly those of the
regular generator) are built around one of these, with sub-graphs from the regular
generator:
- chain: a deep elementwise chain, 8 to 24 unary/binary nodes (tanh(w * h + b) with
  parameters w, b of h's extents, tanh(h) * c + d, exp(h * 0.5 - 0.5) * 0.5, sigmoid, h * w,
  h + b, skips to an earlier level, broadcast biases and scales: rows, columns, scalars),
  its parameters read at several levels and some reused: one elementwise region, whose
  parameters share one multi_use kernel (the broadcast ones as row, column and scalar
  members);
- shared: one sub-expression object h read several times (h * h + tanh(h), a reduction of h
  broadcast back), bare or as gx::saved(h), at one or two levels (the result read again with
  h, maybe saved itself);
- reduce: reductions read inside expressions (calls keep them in buffers): x - mean<A>(x,
  keep_dims), x / sum<A>(x, keep_dims) for x > 0, softmax, logsumexp log(sum<A>(exp(x -
  max<A>(x, keep_dims)), K)) + max<A>(x, K) (the max read twice or written twice, maybe
  saved), a reduction or a logsumexp gathered through an index vector and read by an
  elementwise node, and any of these under one more reduction;
- model: model-shaped graphs (issue 32): an input (T, D) or (B, T, D) through two to four
  layers: a linear map (gx::matmul by a parameter, a bias, tanh/sigmoid), gx::layer_norm /
  gx::rms_norm (with or without affine parameters), gx::softmax / gx::log_softmax over any
  axis (inner ones included), a reduction broadcast back (x - mean<A>(x), x scaled by its
  root mean square along A), a residual h + tanh(h W) * h with h shared by gx::let or read
  as a plain value, and self-attention over T (causal or not, h bound by gx::let); then a
  sum or mean over everything, or the output itself (seeded by W).

Every graph's backward is held to the compile-time cost rule (include/gradix/api/cost.hpp):
backward_cost_v <= 6 forward_cost_v, a static_assert (RG_CHECK_COST, random_graph.hpp).

Staying inside the domains, away from the kinks
-----------------------------------------------
- Domains by interval arithmetic at build time: every node carries a sound interval
  [lo, hi] for its values, from the intervals its leaves are drawn from. An operation with a
  domain asks its operand for one: log, sqrt and the divisor of `/` need values >= 0.2;
  pow needs a base in [0.2, 4] and an exponent in [-2, 2]; exp, square and both factors of
  `*` (and the dividend of `/`) need |values| <= 3 (this also bounds every value, so
  gradients stay moderate). The patterns of the special families narrow the intervals
  plain interval arithmetic gives by what they know: x - max(x) is in [lo - hi, 0], the sum
  of its exp in [1, n], a logsumexp in [max, max + log(n)], x / sum(x) and a softmax in
  (0, 1]. A leaf is drawn from an interval that satisfies the request; an inner node that
  does not is wrapped in a guard, which is part of the graph (it counts in the depth): e.g.
  log(sigmoid(x) + 0.5), sqrt(square(x) + 0.5), exp(tanh(x)), exp(x) for a bounded x,
  tanh(x), x * 0.25.
- Kinks at run time: the reference evaluator records, for every relu and abs, the smallest
  |argument|, for every binary max/min the smallest |a - b|, and for every max reduction the
  gap between the maximum and the next smaller element. If any is below 1e-3 the data are
  drawn again (next draw of the same run-time seed; up to 200). Exact ties (an argument
  exactly 0, two exactly equal operands) are allowed: they come from the structure (the same
  element read twice, a relu that is 0 on a neighbourhood), where central differences and
  the subgradient conventions agree. The central-difference step is 1e-6 max(1, |x|), three
  orders below the margin.

Checks (per graph, tests/random/random_graph.hpp)
-------------------------------------------------
- forward: gx::eval(root) (gx::value for rank 0) against a reference evaluator with plain
  loops over std::vector<double> (tests/random/ref.cpp), independent of gradix;
- gradients of every parameter, through gx::grad(sum(W * root), params...),
  gx::backward(root, W) (W: run-time random weights), or for a rank-0 root gx::grad(root,
  ...) / gx::backward(root), against central differences of the reference evaluator in
  double precision (with tests/ad/numgrad.hpp's tolerance; rtol 1e-6, atol 1e-8 plus the
  rounding noise of each quotient).
A failure prints the generator seed, the graph id, the run-time seed and the graph (the
generated statements).

Rank-0 shapes are spelled gx::shape<>{}.

Compile time is what limits the count: each graph instantiates gradix's eval and one
backward pass for its own types, about 0.7-1 s of -O1 code generation per graph, and it
grows with the size of the root's type (a sub-expression read twice counts twice): a chain
graph costs about 2 s, a shared one about 1.5 s, a reduce one about 1.2 s (CHAIN_TREE,
SHARED_TREE and SHARED_TREE_MAX keep them there).
"""

import argparse
import math
import random
import re

MAX_RANK = 4
MAX_SIZE = 64
MAX_DEPTH = 6  # the depth of a graph (root height) is drawn from 1..MAX_DEPTH

# Domain requests: name -> (predicate on an interval, leaf intervals that satisfy it)
DOMAINS = {
    'pos': (lambda lo, hi: lo >= 0.2 and hi <= 1e4, [(0.5, 2.0), (0.3, 1.5)]),
    'posb': (lambda lo, hi: lo >= 0.2 and hi <= 4.0, [(0.5, 2.0), (0.3, 1.5)]),
    'bnd': (lambda lo, hi: -3.0 <= lo and hi <= 3.0, [(-1.0, 1.0), (-2.0, 2.0), (-1.5, 0.5)]),
    'exp2': (lambda lo, hi: -2.0 <= lo and hi <= 2.0, [(-1.0, 1.0), (-2.0, 2.0), (0.5, 1.5)]),
}
FREE_LEAF_RANGES = [(-1.0, 1.0), (-1.0, 1.0), (-2.0, 2.0), (0.5, 2.0), (-2.0, -0.5), (-0.5, 1.5)]

UNARY = {  # name: (C++ spelling, ref enum, domain request)
    'neg': (None, 'NEG', None),
    'exp': ('gx::exp', 'EXP', 'bnd'),
    'log': ('gx::log', 'LOG', 'pos'),
    'sqrt': ('gx::sqrt', 'SQRT', 'pos'),
    'tanh': ('gx::tanh', 'TANH', None),
    'sigmoid': ('gx::sigmoid', 'SIGMOID', None),
    'relu': ('gx::relu', 'RELU', None),
    'abs': ('gx::abs', 'ABS', None),
    'square': ('gx::square', 'SQUARE', 'bnd'),
}
BINARY = {  # name: (infix or function, ref enum, lhs domain, rhs domain)
    '+': ('+', 'ADD', None, None),
    '-': ('-', 'SUB', None, None),
    '*': ('*', 'MUL', 'bnd', 'bnd'),
    '/': ('/', 'DIV', 'bnd', 'pos'),
    'max': ('gx::max', 'MAX', None, None),
    'min': ('gx::min', 'MIN', None, None),
    'pow': ('gx::pow', 'POW', 'posb', 'exp2'),
}
INDEX_TYPES = ['int', 'int', 'long', 'std::int64_t', 'std::uint16_t', 'std::size_t',
               'std::uint8_t']


# The special families: a share of the graphs, chosen from (seed, graph id) by a generator of
# its own, so that the other graphs are the ones the regular generator always drew.
SPECIAL_SHARE = 0.2
FAMILIES = [('chain', 4), ('shared', 3), ('reduce', 4), ('model', 5)]
CHAIN_REUSE = 0.35  # a chain level reads one of the chain's parameters again
# Compile time grows with the size of the root's type, where a sub-expression read twice counts
# twice: a chain's skip to an earlier level and the second level of a shared graph are left out
# when the type would grow beyond these (nodes); a shared graph's first level is drawn again
# (up to 3 times) while larger than SHARED_TREE_MAX.
CHAIN_TREE = 40
SHARED_TREE = 14
SHARED_TREE_MAX = 30


def family_of(seed, gid):
    r = random.Random('gen_random_graphs family %d %d' % (seed, gid))
    if r.random() >= SPECIAL_SHARE:
        return None
    return r.choices([f for f, _ in FAMILIES], [w for _, w in FAMILIES])[0]


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def fmt(c):
    s = repr(float(c))
    return s


def iv_unary(op, lo, hi, c=None):
    if op == 'neg':
        return -hi, -lo
    if op == 'exp':
        return math.exp(lo), math.exp(hi)
    if op == 'log':
        return math.log(lo), math.log(hi)
    if op == 'sqrt':
        return math.sqrt(lo), math.sqrt(hi)
    if op == 'tanh':
        return math.tanh(lo), math.tanh(hi)
    if op == 'sigmoid':
        return 1 / (1 + math.exp(-lo)), 1 / (1 + math.exp(-hi))
    if op == 'relu':
        return max(lo, 0.0), max(hi, 0.0)
    if op in ('abs', 'square'):
        if lo >= 0:
            a, b = lo, hi
        elif hi <= 0:
            a, b = -hi, -lo
        else:
            a, b = 0.0, max(-lo, hi)
        return (a, b) if op == 'abs' else (a * a, b * b)
    raise ValueError(op)


def iv_binary(op, a, b):
    (al, ah), (bl, bh) = a, b
    if op == '+':
        return al + bl, ah + bh
    if op == '-':
        return al - bh, ah - bl
    if op in ('*', '/', 'pow'):
        if op == '/':
            assert bl > 0 or bh < 0
        if op == 'pow':
            assert al > 0
        f = {'*': lambda x, y: x * y, '/': lambda x, y: x / y, 'pow': lambda x, y: x ** y}[op]
        vs = [f(x, y) for x in (al, ah) for y in (bl, bh)]
        return min(vs), max(vs)
    if op == 'max':
        return max(al, bl), max(ah, bh)
    if op == 'min':
        return min(al, bl), min(ah, bh)
    raise ValueError(op)


def fits(dom, lo, hi):
    return dom is None or DOMAINS[dom][0](lo, hi)


class Node:
    def __init__(self, nid, var, ref, shape, lo, hi, height, leaf=None):
        self.id = nid
        self.var = var        # C++ variable of the gradix expression (leaves: x<k>)
        self.ref = ref        # C++ variable of the reference value
        self.shape = shape    # [(extent, static)]
        self.lo, self.hi = lo, hi
        self.height = height
        self.leaf = leaf      # leaf number, for leaves
        self.structural = False  # a reduce, index or view node
        self.tree = 1         # nodes of its C++ type (shared sub-expressions counted per read)

    @property
    def extents(self):
        return [e for e, _ in self.shape]


class Rollback(Exception):
    pass


class Graph:
    def __init__(self, seed, gid):
        self.seed, self.gid = seed, gid
        self.rng = random.Random(seed * 1000003 + gid)
        self.nodes = []
        self.leaves = []     # dicts: shape, lo, hi, layout, param, spec
        self.ints = []       # (kind, n, m, ctype)
        self.gx = []         # gradix statements (node definitions)
        self.refl = []       # reference statements
        self.ops = 0
        self.max_ops = self.rng.choice([6, 8, 10, 12, 12])

    # ---- state for rollback
    def snapshot(self):
        return (len(self.nodes), len(self.leaves), len(self.ints), len(self.gx), len(self.refl),
                self.ops)

    def restore(self, s):
        n, l, i, g, r, o = s
        del self.nodes[n:]
        del self.leaves[l:]
        del self.ints[i:]
        del self.gx[g:]
        del self.refl[r:]
        self.ops = o

    # ---- emitting nodes
    def add(self, expr, refexpr, shape, lo, hi, children):
        nid = len(self.nodes)
        var, rv = 'n%d' % nid, 'r%d' % nid
        self.gx.append('auto %s = %s;' % (var, expr))
        self.refl.append('auto %s = %s;' % (rv, refexpr.replace('@', str(nid))))
        h = 1 + max([c.height for c in children], default=0)
        node = Node(nid, var, rv, shape, lo, hi, h)
        node.structural = not refexpr.startswith(('R.unary', 'R.binary'))
        node.tree = 1 + sum(c.tree for c in children)
        self.nodes.append(node)
        self.ops += 1
        return node

    def new_int(self, kind, n, m, ctype='int'):
        self.ints.append((kind, n, m, ctype))
        k = len(self.ints) - 1
        return k

    # ---- shapes
    @staticmethod
    def satisfies(node, req):
        if len(node.shape) != len(req):
            return False
        for (e, s), (re, need1) in zip(node.shape, req):
            if e != re or (need1 and not s):
                return False
        return True

    def rand_static(self, req):
        return [(e, True if need1 else self.rng.random() < 0.5) for e, need1 in req]

    def dims(self, shape):
        if not shape:  # gx::dims() warns (-Wunused-but-set-variable) in gradix 0.1.0
            return 'gx::shape<>{}'
        return 'gx::dims(%s)' % ', '.join('gx::fix<%d>' % e if s else str(e) for e, s in shape)

    def bcast_req(self, req):
        """A shape that broadcasts to req (some axes static 1, leading axes dropped)."""
        rng = self.rng
        for _ in range(10):
            out = [(1, True) if e > 1 and rng.random() < 0.45 else (e, n) for e, n in req]
            drop = 0
            if rng.random() < 0.3:
                drop = rng.randint(1, len(req)) if req else 0
            out = out[drop:]
            if out != list(req):
                return out
        return [(1, True) if e > 1 else (e, n) for e, n in req][1:]

    def rand_extent(self, lo=2, hi=5):
        return self.rng.randint(lo, hi)

    # ---- leaves
    def leaf(self, req, dom):
        rng = self.rng
        # reuse a leaf (a parameter used several times)
        cands = [n for n in self.nodes if n.leaf is not None and self.satisfies(n, req)
                 and fits(dom, n.lo, n.hi)]
        if cands and rng.random() < 0.35:
            return rng.choice(cands)
        lo, hi = rng.choice(DOMAINS[dom][1] if dom else FREE_LEAF_RANGES)
        shape = self.rand_static(req)
        k = len(self.leaves)
        layout = rng.choice(['gx::row_major', 'gx::row_major', 'gx::col_major'])
        rank = len(shape)
        spec = None
        if rank > 0 and rng.random() < 0.7:
            kind = rng.choice(['dense_grad', 'dense_grad', 'sparse_grad'])  # sparse compiles slower
            spec = 'gx::%s<%d>' % (kind, rng.randrange(rank))
        self.leaves.append(dict(shape=shape, lo=lo, hi=hi, layout=layout,
                                param=rng.random() < 0.8, spec=spec))
        nid = len(self.nodes)
        var, rv = 'x%d' % k, 'r%d' % nid
        self.refl.append('auto %s = R.leaf(%d, {%s}, D.leaf[%d]);' % (
            rv, nid, ', '.join(str(e) for e, _ in shape), k))
        node = Node(nid, var, rv, shape, lo, hi, 0, leaf=k)
        self.nodes.append(node)
        return node

    # ---- guards
    def guard(self, x, dom, budget):
        """Wraps x so that it satisfies dom, with at most `budget` levels; None if impossible."""
        lo, hi = x.lo, x.hi
        m = max(abs(lo), abs(hi))
        opts = []
        if dom in ('pos', 'posb'):
            top = 4.0 if dom == 'posb' else 1e4
            if hi <= -0.2 and -lo <= top:
                opts.append((1, lambda: self.mk_unary('neg', x)))
            if lo >= -1.6 and hi <= math.log(top) and hi <= 3:
                opts.append((1, lambda: self.mk_unary('exp', x)))
            opts.append((2, lambda: self.mk_scalar('+', self.mk_unary('sigmoid', x), 0.5, True)))
            opts.append((2, lambda: self.mk_unary('exp', self.mk_unary('tanh', x))))
            if m <= (1.7 if dom == 'posb' else 3.0):
                opts.append((2, lambda: self.mk_scalar('+', self.mk_unary('square', x), 0.5, True)))
            if m <= (3.5 if dom == 'posb' else 1e3):
                opts.append((2, lambda: self.mk_scalar('+', self.mk_unary('abs', x), 0.5, True)))
                opts.append((2, lambda: self.mk_scalar('+', self.mk_unary('relu', x), 0.3, True)))
        else:
            bound = 3.0 if dom == 'bnd' else 2.0
            opts.append((1, lambda: self.mk_unary('tanh', x)))
            if dom == 'bnd':
                opts.append((1, lambda: self.mk_unary('sigmoid', x)))
            if m > 0:
                c = 2.0 ** -math.ceil(math.log2(m / bound))
                if c < 1:
                    opts.append((1, lambda: self.mk_scalar('*', x, c, True)))
        opts = [f for cost, f in opts if cost <= budget]
        if not opts:
            return None
        g = self.rng.choice(opts)()
        assert fits(dom, g.lo, g.hi), (dom, g.lo, g.hi)
        return g

    # ---- node builders (emit code)
    def mk_unary(self, op, x, c=None):
        if op == 'pow':
            lo, hi = sorted([x.lo ** c, x.hi ** c])
            return self.add('gx::pow(%s, %s)' % (x.var, fmt(c)),
                            'R.binary(@, rg::POW, %s, %s)' % (x.ref, fmt(c)), x.shape, lo, hi, [x])
        lo, hi = iv_unary(op, x.lo, x.hi)
        spell, enum, _ = UNARY[op]
        expr = '-%s' % x.var if op == 'neg' else '%s(%s)' % (spell, x.var)
        return self.add(expr, 'R.unary(@, rg::%s, %s)' % (enum, x.ref), x.shape, lo, hi, [x])

    def mk_scalar(self, op, x, c, right):
        """x op c (right) or c op x; op in + - * / max min."""
        spell, enum, _, _ = BINARY[op]
        cs = fmt(c)
        if op in ('max', 'min'):
            expr = '%s(%s, %s)' % ((spell, x.var, cs) if right else (spell, cs, x.var))
        else:
            expr = '%s %s %s' % ((x.var, spell, cs) if right else (cs, spell, x.var))
        refe = 'R.binary(@, rg::%s, %s)' % (enum, '%s, %s' % ((x.ref, cs) if right else (cs, x.ref)))
        civ = (c, c)
        lo, hi = iv_binary(op, (x.lo, x.hi), civ) if right else iv_binary(op, civ, (x.lo, x.hi))
        return self.add(expr, refe, x.shape, lo, hi, [x])

    def binary_shape(self, a, b):
        """gradix's broadcast_info: result extents and which are static."""
        r = max(len(a.shape), len(b.shape))
        pa = [(1, True)] * (r - len(a.shape)) + a.shape
        pb = [(1, True)] * (r - len(b.shape)) + b.shape
        out = []
        for (ea, sa), (eb, sb) in zip(pa, pb):
            if sa and ea == 1:
                out.append((eb, sb))
            elif sb and eb == 1:
                out.append((ea, sa))
            elif not sa:
                out.append((eb, sb) if ea == eb else (ea, sa))
            else:
                out.append((ea, sa))
        return out

    def mk_binary(self, op, a, b):
        spell, enum, _, _ = BINARY[op]
        expr = ('%s(%s, %s)' % (spell, a.var, b.var)) if spell.startswith('gx::') else \
            '%s %s %s' % (a.var, spell, b.var)
        lo, hi = iv_binary(op, (a.lo, a.hi), (b.lo, b.hi))
        return self.add(expr, 'R.binary(@, rg::%s, %s, %s)' % (enum, a.ref, b.ref),
                        self.binary_shape(a, b), lo, hi, [a, b])

    # ---- the recursive generator: a node of extents req (need1: static extent 1 required)
    def gen(self, req, d, dom=None):
        if dom is not None:
            return self.gen_dom(req, d, dom)
        rng = self.rng
        if d > 0 and rng.random() < 0.12:
            cands = [n for n in self.nodes if n.leaf is None and n.height <= d
                     and self.satisfies(n, req)]
            if cands:
                return rng.choice(cands)
        if d == 0 or self.ops >= self.max_ops or rng.random() < 0.04:
            return self.leaf(req, None)
        kinds = [('unary', 3.0), ('scalar', 1.2), ('binary', 3.0), ('reduce', 1.6),
                 ('index', 2.6), ('permute', 0.8), ('unsqueeze', 0.8), ('reshape', 0.8),
                 ('broadcast_to', 0.6)]
        for _ in range(20):
            kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
            s = self.snapshot()
            try:
                n = getattr(self, 'gen_' + kind)(req, d)
            except Rollback:
                n = None
            if n is not None:
                return n
            self.restore(s)
        return self.leaf(req, None)

    def gen_dom(self, req, d, dom):
        if d == 0 or self.ops >= self.max_ops:
            return self.leaf(req, dom)
        # the full depth first; then leave one or two levels for a guard
        for g in range(0, min(d, 2) + 1):
            s = self.snapshot()
            x = self.gen(req, d - g)
            if fits(dom, x.lo, x.hi):
                return x
            if g > 0:
                y = self.guard(x, dom, g)
                if y is not None:
                    return y
            self.restore(s)
        return self.leaf(req, dom)

    def child_depth(self, d, main):
        return d - 1 if main else self.rng.randint(0, d - 1)

    def gen_unary(self, req, d):
        rng = self.rng
        op = rng.choice(list(UNARY) + ['pow'])
        if op == 'pow':
            c = rng.choice([0.5, 1.5, 2.0, -0.5, 3.0, -1.0, 2.5])
            x = self.gen(req, d - 1, 'posb')
            return self.mk_unary('pow', x, c)
        x = self.gen(req, d - 1, UNARY[op][2])
        return self.mk_unary(op, x)

    def gen_scalar(self, req, d):
        rng = self.rng
        op = rng.choice(['+', '-', '*', '/', 'max', 'min', '*', '+'])
        right = rng.random() < 0.5
        if op == '/' and not right:
            x = self.gen(req, d - 1, 'pos')
            c = rng.choice([1.0, -0.5, 2.0])
        elif op in ('max', 'min'):
            x = self.gen(req, d - 1)
            c = rng.choice([0.0, 0.25, -0.3, 0.5])
        else:
            x = self.gen(req, d - 1, 'bnd' if op in ('*', '/') else None)
            c = rng.choice([0.5, -1.5, 2.0, 0.75, -0.25, 3.0, 1.25])
        return self.mk_scalar(op, x, c, right)

    def gen_binary(self, req, d):
        rng = self.rng
        op = rng.choice(['+', '+', '-', '*', '*', '/', 'max', 'min', 'pow'])
        _, _, da, db = BINARY[op]
        ra = rb = list(req)
        if rng.random() < 0.55:
            if rng.random() < 0.5:
                rb = self.bcast_req(req)
            else:
                ra = self.bcast_req(req)
        main_a = rng.random() < 0.5
        a = self.gen(ra, self.child_depth(d, main_a), da)
        b = self.gen(rb, self.child_depth(d, not main_a), db)
        n = self.mk_binary(op, a, b)
        if not self.satisfies(n, req):
            raise Rollback()
        return n

    @staticmethod
    def reduced(x, axes, keep, op):
        """The shape and value interval of reduction op of x over axes."""
        shape = []
        for k, (e, s) in enumerate(x.shape):
            if k in axes:
                if keep:
                    shape.append((1, True))
            else:
                shape.append((e, s))
        cnt = prod(x.extents[k] for k in axes)
        lo, hi = (x.lo * cnt, x.hi * cnt) if op == 'sum' else (x.lo, x.hi)
        return shape, lo, hi

    def gen_reduce(self, req, d):
        rng = self.rng
        op = rng.choice(['sum', 'sum', 'mean', 'max'])
        r = len(req)
        enum = {'sum': 'RSUM', 'mean': 'RMEAN', 'max': 'RMAX'}[op]
        if r == 0:
            cr = rng.randint(1, 3)
            for _ in range(10):
                ce = [self.rand_extent(2, 5) for _ in range(cr)]
                if prod(ce) <= MAX_SIZE:
                    break
            else:
                return None
            x = self.gen([(e, False) for e in ce], d - 1)
            if cr == 1 and rng.random() < 0.4:
                ax = rng.choice([0, -1])
                expr = 'gx::%s<%d>(%s)' % (op, ax, x.var)
            else:
                expr = 'gx::%s(%s)' % (op, x.var)
            refe = 'R.reduce(@, rg::%s, %s, {}, false)' % (enum, x.ref)
            cnt = prod(ce)
            lo, hi = (x.lo * cnt, x.hi * cnt) if op == 'sum' else (x.lo, x.hi)
            return self.add(expr, refe, [], lo, hi, [x])
        ones = [k for k, (e, _) in enumerate(req) if e == 1]
        keep = bool(ones) and rng.random() < 0.45
        if keep:
            axes = rng.sample(ones, min(len(ones), rng.choice([1, 1, 2])))
            child = list(req)
            for k in axes:
                child[k] = (self.rand_extent(2, 5), False)
        else:
            k = rng.choice([1, 1, 2])
            if r + k > MAX_RANK:
                k = MAX_RANK - r
            if k <= 0:
                return None
            child = list(req)
            axes = []
            for _ in range(k):
                pos = rng.randint(0, len(child))
                child.insert(pos, None)
            axes = [i for i, c in enumerate(child) if c is None]
            child = [(self.rand_extent(2, 5), False) if c is None else c for c in child]
        for _ in range(10):
            if prod(e for e, _ in child) <= MAX_SIZE:
                break
            child = [(2, False) if k in axes else c for k, c in enumerate(child)]
        if prod(e for e, _ in child) > MAX_SIZE:
            return None
        x = self.gen(child, d - 1)
        cr = len(child)
        spelled = sorted(axes)
        rng.shuffle(spelled)
        spelled = [a - cr if rng.random() < 0.3 else a for a in spelled]
        if keep and sorted(axes) == list(range(cr)) and rng.random() < 0.5:
            expr = 'gx::%s(%s, gx::keep_dims)' % (op, x.var)  # every axis, kept
        else:
            expr = 'gx::%s<%s>(%s%s)' % (op, ', '.join(map(str, spelled)), x.var,
                                         ', gx::keep_dims' if keep else '')
        refe = 'R.reduce(@, rg::%s, %s, {%s}, %s)' % (enum, x.ref, ', '.join(map(str, sorted(axes))),
                                                       'true' if keep else 'false')
        shape, lo, hi = self.reduced(x, axes, keep, op)
        n = self.add(expr, refe, shape, lo, hi, [x])
        assert self.satisfies(n, req), (shape, req)
        return n

    def gen_index(self, req, d):
        rng = self.rng
        r = len(req)
        nsel = 1 if (r < MAX_RANK and rng.random() < 0.3) else 0
        cr = r + nsel
        sel_pos = rng.sample(range(cr), nsel)
        args = []      # per child axis: (kind, data)
        child = []
        it = iter(req)
        for k in range(cr):
            if k in sel_pos:
                m = self.rand_extent(2, 5)
                args.append(('select', m))
                child.append((m, False))
                continue
            e, need1 = next(it)
            opts = ['all']
            if need1:
                opts += ['at', 'at']
            else:
                opts += ['idx', 'idx', 'range', 'range']
                if e == 1:
                    opts += ['at']
            kind = rng.choice(opts)
            if kind == 'all':
                args.append(('all', None))
                child.append((e, need1))
            elif kind == 'at':
                m = self.rand_extent(2, 5)
                args.append(('at', m))
                child.append((m, False))
            elif kind == 'idx':
                m = self.rand_extent(2, 6)
                unique = e <= m and rng.random() < 0.25
                args.append(('unique' if unique else 'idx', (e, m)))
                child.append((m, False))
            else:
                step = rng.choice([1, 1, 2, 3, -1, -2])
                span = abs(step) * (e - 1) + 1
                m = span + rng.randint(0, 2)
                if step > 0:
                    start = rng.randint(0, m - span)
                    last = start + step * (e - 1)
                    stop = rng.randint(last + 1, last + step)
                else:
                    start = rng.randint(span - 1, m - 1)
                    last = start + step * (e - 1)
                    stop = rng.randint(last + step, last - 1)
                args.append(('range', (start, stop, step)))
                child.append((m, False))
        if all(a[0] == 'all' for a in args):
            return None
        if prod(e for e, _ in child) > MAX_SIZE:
            return None
        x = self.gen(child, d - 1)
        # index data and spellings
        spell, refs = [], []
        for k, (kind, data) in enumerate(args):
            if kind == 'all':
                spell.append('gx::all')
                refs.append('rg::all()')
            elif kind in ('select', 'at'):
                j = self.new_int('ONE', 1, data)
                spell.append('j%d' % j if kind == 'select' else 'gx::at(j%d)' % j)
                refs.append('rg::%s(D.pos[%d])' % (kind, j))
            elif kind in ('idx', 'unique'):
                n, m = data
                t = rng.choice(INDEX_TYPES)
                j = self.new_int('UNIQUE' if kind == 'unique' else 'DUP', n, m, t)
                if kind == 'unique':
                    spell.append('gx::unique(gx::indices(i%d))' % j)
                else:
                    spell.append(rng.choice(['gx::indices(i%d)' % j, 'i%d' % j]))
                refs.append('rg::list(D.idx[%d])' % j)
            else:
                a, b, c = data
                spell.append('gx::range(%d, %d, %d)' % (a, b, c))
                refs.append('rg::range(%d, %d, %d)' % (a, b, c))
        nonall = [k for k, a in enumerate(args) if a[0] != 'all']
        any_nonint = any(a[0] != 'select' for a in args)
        style = rng.random()
        if x.leaf is not None and any_nonint and style < 0.4:
            expr = '%s(%s)' % (x.var, ', '.join(spell))
        elif len(nonall) == 1 and style < 0.75:
            k = nonall[0]
            ax = k - cr if rng.random() < 0.3 else k
            kind, data = args[k]
            if kind == 'select':
                expr = 'gx::select<%d>(%s, %s)' % (ax, x.var, spell[k])
            elif kind == 'range' and rng.random() < 0.6:
                a, b, c = data
                expr = 'gx::slice<%d>(%s, %d, %d%s)' % (ax, x.var, a, b,
                                                       '' if c == 1 and rng.random() < 0.5 else ', %d' % c)
            else:
                expr = 'gx::gather<%d>(%s, %s)' % (ax, x.var, spell[k])
        else:
            expr = 'gx::index(%s, %s)' % (x.var, ', '.join(spell))
        refe = 'R.index_(@, %s, {%s})' % (x.ref, ', '.join(refs))
        shape = []
        for (kind, data), (e, s) in zip(args, x.shape):
            if kind == 'all':
                shape.append((e, s))
            elif kind == 'at':
                shape.append((1, True))
            elif kind in ('idx', 'unique'):
                shape.append((data[0], False))
            elif kind == 'range':
                a, b, c = data
                shape.append((len(range(a, b, c)), False))
        n = self.add(expr, refe, shape, x.lo, x.hi, [x])
        assert self.satisfies(n, req), (shape, req, args)
        return n

    def gen_permute(self, req, d):
        rng = self.rng
        r = len(req)
        if r < 2:
            return None
        perm = list(range(r))
        while perm == list(range(r)):
            rng.shuffle(perm)
        child = [None] * r
        for k in range(r):
            child[perm[k]] = req[k]
        x = self.gen(child, d - 1)
        if perm == list(reversed(range(r))) and rng.random() < 0.6:
            expr = 'gx::transpose(%s)' % x.var
        else:
            expr = 'gx::permute<%s>(%s)' % (', '.join(map(str, perm)), x.var)
        shape = [x.shape[perm[k]] for k in range(r)]
        return self.add(expr, 'R.permute(@, %s, {%s})' % (x.ref, ', '.join(map(str, perm))),
                        shape, x.lo, x.hi, [x])

    def gen_unsqueeze(self, req, d):
        rng = self.rng
        ones = [k for k, (e, _) in enumerate(req) if e == 1]
        if not ones:
            return None
        a = rng.choice(ones)
        child = req[:a] + req[a + 1:]
        x = self.gen(child, d - 1)
        r = len(req)
        ax = a - r if rng.random() < 0.35 else a
        shape = x.shape[:a] + [(1, True)] + x.shape[a:]
        return self.add('gx::unsqueeze<%d>(%s)' % (ax, x.var),
                        'R.unsqueeze(@, %s, %d)' % (x.ref, a), shape, x.lo, x.hi, [x])

    def factor_shape(self, n):
        rng = self.rng
        r = rng.randint(1, MAX_RANK)
        out = []
        for k in range(r - 1):
            divs = [q for q in range(1, n + 1) if n % q == 0]
            q = rng.choice(divs)
            out.append(q)
            n //= q
        out.append(n)
        rng.shuffle(out)
        return out

    def gen_reshape(self, req, d):
        rng = self.rng
        n = prod(e for e, _ in req)
        for _ in range(6):
            ce = self.factor_shape(n)
            if ce != [e for e, _ in req]:
                break
        x = self.gen([(e, False) for e in ce], d - 1)
        shape = [(e, True if need1 else rng.random() < 0.4) for e, need1 in req]
        if all(s for _, s in shape) and rng.random() < 0.5:
            target = 'gx::shape<%s>{}' % ', '.join(str(e) for e, _ in shape)
        else:
            target = self.dims(shape)
        return self.add('gx::reshape(%s, %s)' % (x.var, target),
                        'R.reshape(@, %s, {%s})' % (x.ref, ', '.join(str(e) for e, _ in shape)),
                        shape, x.lo, x.hi, [x])

    def gen_broadcast_to(self, req, d):
        rng = self.rng
        if not req:
            return None
        child = self.bcast_req(req)
        x = self.gen(child, d - 1)
        shape = [(e, True if need1 else rng.random() < 0.4) for e, need1 in req]
        return self.add('gx::broadcast_to(%s, %s)' % (x.var, self.dims(shape)),
                        'R.broadcast_to(@, %s, {%s})' % (x.ref, ', '.join(str(e) for e, _ in shape)),
                        shape, x.lo, x.hi, [x])

    # ---- the special families (about SPECIAL_SHARE of the graphs; family_of)
    def sub(self, req, d, dom=None, ops=3):
        """A sub-graph of the regular generator with at most `ops` more operations."""
        keep = self.max_ops
        self.max_ops = self.ops + ops
        try:
            return self.gen(req, d, dom)
        finally:
            self.max_ops = keep

    def need(self, x, dom):
        """x, or x behind a guard, inside domain dom."""
        if fits(dom, x.lo, x.hi):
            return x
        y = self.guard(x, dom, 2)
        assert y is not None, (dom, x.lo, x.hi)
        return y

    @staticmethod
    def tighten(n, lo, hi):
        """A sound interval known from a pattern (correlations that plain interval arithmetic
        loses, e.g. x - max(x) <= 0)."""
        n.lo, n.hi = max(n.lo, lo), min(n.hi, hi)
        assert n.lo <= n.hi, (n.lo, n.hi)
        return n

    def mk_saved(self, x):
        return self.add('gx::saved(%s)' % x.var, x.ref, x.shape, x.lo, x.hi, [x])

    def mk_reduce(self, op, x, axes, keep):
        """op in sum mean max over the (normalized) axes of x."""
        rng = self.rng
        cr = len(x.shape)
        axes = sorted(axes)
        enum = {'sum': 'RSUM', 'mean': 'RMEAN', 'max': 'RMAX'}[op]
        every = axes == list(range(cr))
        if every and (cr > 1 or rng.random() < 0.5) and (not keep or rng.random() < 0.5):
            expr = 'gx::%s(%s%s)' % (op, x.var, ', gx::keep_dims' if keep else '')
        else:
            spelled = list(axes)
            rng.shuffle(spelled)
            spelled = [a - cr if rng.random() < 0.3 else a for a in spelled]
            expr = 'gx::%s<%s>(%s%s)' % (op, ', '.join(map(str, spelled)), x.var,
                                         ', gx::keep_dims' if keep else '')
        refe = 'R.reduce(@, rg::%s, %s, {%s}, %s)' % (enum, x.ref, ', '.join(map(str, axes)),
                                                       'true' if keep else 'false')
        shape, lo, hi = self.reduced(x, axes, keep, op)
        return self.add(expr, refe, shape, lo, hi, [x])

    def reduced_child(self, req):
        """(child extents, reduced axes, keep_dims) of a reduction whose result has extents req;
        None if the child would be too large."""
        rng = self.rng
        r = len(req)
        if r == 0:
            cr = rng.randint(1, 3)
            child = [(self.rand_extent(2, 5), False) for _ in range(cr)]
            while prod(e for e, _ in child) > MAX_SIZE:
                child = [(2, False)] + child[1:] if child[0][0] > 2 else child[1:]
            return child, list(range(len(child))), False
        ones = [k for k, (e, _) in enumerate(req) if e == 1]
        if ones and rng.random() < 0.5:
            axes = sorted(rng.sample(ones, min(len(ones), rng.choice([1, 1, 2]))))
            child = [(self.rand_extent(2, 5), False) if k in axes else c for k, c in enumerate(req)]
            keep = True
        else:
            k = min(rng.choice([1, 1, 2]), MAX_RANK - r)
            if k <= 0:
                return None
            child = list(req)
            for _ in range(k):
                child.insert(rng.randint(0, len(child)), None)
            axes = [i for i, c in enumerate(child) if c is None]
            child = [(self.rand_extent(2, 5), False) if c is None else c for c in child]
            keep = False
        if prod(e for e, _ in child) > MAX_SIZE:
            child = [(2, False) if k in axes else c for k, c in enumerate(child)]
        if prod(e for e, _ in child) > MAX_SIZE:
            return None
        return child, axes, keep

    def pattern_axes(self, x):
        r = len(x.shape)
        big = [k for k, (e, _) in enumerate(x.shape) if e > 1] or list(range(r))
        n = self.rng.choice([1, 1, 1, 2, r])
        return sorted(self.rng.sample(big, min(n, len(big))))

    # Patterns: reductions read inside expressions (calls keep them in buffers). Each returns a
    # node of extents req, or None.
    def pat_center(self, req, d):  # x - mean<A>(x, keep_dims)
        if not req:
            return None
        x = self.sub(req, d, None)
        axes = self.pattern_axes(x)
        m = self.mk_reduce('mean', x, axes, True)
        if self.rng.random() < 0.25:
            m = self.mk_saved(m)
        n = self.mk_binary('-', x, m)
        return self.tighten(n, x.lo - x.hi, x.hi - x.lo)

    def pat_normalize(self, req, d):  # x / sum<A>(x, keep_dims), x > 0
        if not req:
            return None
        x = self.sub(req, d, 'pos')
        axes = self.pattern_axes(x)
        cnt = prod(x.extents[k] for k in axes)
        s = self.mk_reduce('sum', x, axes, True)
        n = self.mk_binary('/', x, s)
        lo, hi = x.lo, x.hi
        return self.tighten(n, lo / (lo + (cnt - 1) * hi), hi / (hi + (cnt - 1) * lo))

    def pat_softmax(self, req, d):  # e = exp(x - max<A>(x, keep_dims)); e / sum<A>(e, keep_dims)
        if not req:
            return None
        x = self.sub(req, d, 'bnd' if self.rng.random() < 0.6 else None)
        axes = self.pattern_axes(x)
        cnt = prod(x.extents[k] for k in axes)
        m = self.mk_reduce('max', x, axes, True)
        c = self.tighten(self.mk_binary('-', x, m), x.lo - x.hi, 0.0)
        e = self.mk_unary('exp', c)
        if self.rng.random() < 0.3:
            e = self.mk_saved(e)
        s = self.mk_reduce('sum', e, axes, True)
        s = self.tighten(s, 1.0 + (cnt - 1) * e.lo, cnt)
        n = self.mk_binary('/', e, s)
        return self.tighten(n, e.lo / cnt, 1.0)

    def pat_lse(self, req, d):
        """log(sum<A>(exp(x - max<A>(x, keep_dims)), K)) + max<A>(x, K) (K: keep_dims or not);
        in [max, max + log(n)]."""
        rng = self.rng
        rc = self.reduced_child(req)
        if rc is None:
            return None
        child, axes, keep = rc
        x = self.sub(child, d, 'bnd' if rng.random() < 0.5 else None)
        cnt = prod(x.extents[k] for k in axes)
        m = self.mk_reduce('max', x, axes, True)
        if rng.random() < 0.3:
            m = self.mk_saved(m)
        c = self.tighten(self.mk_binary('-', x, m), x.lo - x.hi, 0.0)
        e = self.mk_unary('exp', c)
        s = self.mk_reduce('sum', e, axes, keep)
        s = self.tighten(s, 1.0 + (cnt - 1) * e.lo, cnt)
        ls = self.mk_unary('log', s)
        style = rng.random()
        if keep and style < 0.4:
            m2 = m  # the same max, read twice
        else:
            m2 = self.mk_reduce('max', x, axes, keep)  # written twice
            if rng.random() < 0.2:
                m2 = self.mk_saved(m2)
        n = self.mk_binary('+', ls, m2) if rng.random() < 0.7 else self.mk_binary('+', m2, ls)
        return self.tighten(n, x.lo, x.hi + math.log(cnt))

    def pat_gather(self, req, d):
        """A reduction (or a logsumexp) gathered through an index vector, read by an
        elementwise node."""
        rng = self.rng
        free = [k for k, (e, need1) in enumerate(req) if not need1]
        if not free:
            return None
        k = rng.choice(free)
        inner = list(req)
        inner[k] = (self.rand_extent(2, 5), False)
        if prod(e for e, _ in inner) > MAX_SIZE:
            return None
        if rng.random() < 0.4:
            y = self.pat_lse(inner, d)
        else:
            rc = self.reduced_child(inner)
            if rc is None:
                return None
            child, axes, keep = rc
            x = self.sub(child, d, None)
            y = self.mk_reduce(rng.choice(['sum', 'mean', 'max', 'max']), x, axes, keep)
        if y is None:
            return None
        n, m = req[k][0], y.shape[k][0]
        j = self.new_int('DUP', n, m, rng.choice(INDEX_TYPES))
        iv = rng.choice(['gx::indices(i%d)' % j, 'i%d' % j])
        r = len(req)
        if rng.random() < 0.6:
            ax = k - r if rng.random() < 0.3 else k
            expr = 'gx::gather<%d>(%s, %s)' % (ax, y.var, iv)
        else:
            expr = 'gx::index(%s, %s)' % (y.var, ', '.join(iv if a == k else 'gx::all'
                                                         for a in range(r)))
        refs = ', '.join('rg::list(D.idx[%d])' % j if a == k else 'rg::all()' for a in range(r))
        shape = [(n, False) if a == k else y.shape[a] for a in range(r)]
        g = self.add(expr, 'R.index_(@, %s, {%s})' % (y.ref, refs), shape, y.lo, y.hi, [y])
        style = rng.random()
        if style < 0.35:
            z = self.sub(req, 1, None, 2)
            out = self.mk_binary(rng.choice(['+', '-']), *rng.sample([g, z], 2))
        elif style < 0.7:
            z = self.sub(req, 1, 'bnd', 2)
            out = self.mk_binary('*', self.need(g, 'bnd'), z)
        else:
            out = self.mk_unary(rng.choice(['tanh', 'sigmoid']), g)
        if not self.satisfies(out, req):
            return None
        return out

    PATTERNS = [('center', 2), ('normalize', 2), ('softmax', 2), ('lse', 4), ('gather', 3)]

    def gen_pattern(self, req, d, names=None):
        rng = self.rng
        pats = [(p, w) for p, w in self.PATTERNS if names is None or p in names]
        for _ in range(10):
            p = rng.choices([p for p, _ in pats], [w for _, w in pats])[0]
            s = self.snapshot()
            n = getattr(self, 'pat_' + p)(req, d)
            if n is not None:
                return n
            self.restore(s)
        return None

    def root_req(self, ranks=(1, 2, 3), weights=(3, 5, 3)):
        rng = self.rng
        r = rng.choices(ranks, weights)[0]
        for _ in range(20):
            ext = [rng.randint(1, 5) for _ in range(r)]
            if prod(ext) <= MAX_SIZE and (r == 0 or prod(ext) >= 2):
                break
        return [(e, False) for e in ext]

    def build_reduce(self):
        """Reductions read inside expressions, maybe under one more reduction."""
        rng = self.rng
        req = self.root_req((0, 1, 2, 3), (3, 3, 5, 2))
        d = rng.randint(0, 2)
        if not req or rng.random() < 0.35:  # one further reduction above the pattern
            rc = self.reduced_child(req)
            if rc is not None:
                child, axes, keep = rc
                p = self.gen_pattern(child, d)
                if p is not None:
                    return self.mk_reduce(rng.choice(['sum', 'sum', 'mean', 'max']), p, axes, keep)
        return self.gen_pattern(req, d) or self.pat_center(req, d)

    def chain_param(self, shape, dom, pool):
        """A parameter of h's extents for a chain level: one of the chain's own (reused at
        several levels) or a new leaf."""
        rng = self.rng
        cands = [w for w in pool if [e for e, _ in w.shape] == [e for e, _ in shape]
                 and fits(dom, w.lo, w.hi)]
        if cands and rng.random() < CHAIN_REUSE:
            return rng.choice(cands)
        w = self.leaf([(e, False) for e, _ in shape], dom)
        if w.leaf is not None and rng.random() < 0.9:
            self.leaves[w.leaf]['param'] = True
        pool.append(w)
        return w

    def build_chain(self):
        """A deep elementwise chain (8 to 24 unary/binary nodes), read by parameters at several
        levels (some reused): one elementwise region, one multi_use kernel for its parameters."""
        rng = self.rng
        req = self.root_req((0, 1, 2, 3), (2, 3, 5, 2))
        style = rng.random()
        if style < 0.45:
            h = self.leaf(req, 'bnd')
            if h.leaf is not None and rng.random() < 0.7:
                self.leaves[h.leaf]['param'] = True
        elif style < 0.8 or not req:
            h = self.sub(req, rng.randint(1, 2), 'bnd', 2)
        else:
            h = self.gen_pattern(req, 1, ['center', 'softmax', 'normalize']) or self.leaf(req, 'bnd')
        length = 8 + int(16.999 * rng.random() ** 1.6)  # 8 to 24, mean about 14 (compile time)
        start = self.ops
        pool = []
        bpool = []  # broadcast parameters of this chain
        levels = [h]
        steps = [('affine_tanh', 4), ('tanh_cd', 2), ('exp_half', 1.5), ('sigmoid', 1.5),
                 ('param_mul', 1.5), ('param_add', 1.5), ('sig_mul', 1), ('skip', 1),
                 ('unary', 1), ('bias_bcast', 1.5), ('scale_bcast', 1)]
        c_of = lambda: rng.choice([0.5, 0.75, 1.5, -0.5, 2.0, -1.25])
        d_of = lambda: rng.choice([0.1, -0.25, 0.5, 0.3, -0.5])
        while self.ops - start < length:
            step = rng.choices([s for s, _ in steps], [w for _, w in steps])[0]
            shape = h.shape
            if step == 'affine_tanh':  # tanh(w * h + b)
                w = self.chain_param(shape, 'bnd', pool)
                b = self.chain_param(shape, None, pool)
                hb = self.need(h, 'bnd')
                p = self.mk_binary('*', *((w, hb) if rng.random() < 0.5 else (hb, w)))
                q = self.mk_binary('+', *((p, b) if rng.random() < 0.7 else (b, p)))
                h = self.mk_unary('tanh', q)
            elif step == 'tanh_cd':  # tanh(h) * c + d
                h = self.mk_scalar('+', self.mk_scalar('*', self.mk_unary('tanh', h), c_of(),
                                                       rng.random() < 0.7), d_of(), True)
            elif step == 'exp_half':  # exp(h * 0.5 - 0.5) * 0.5
                a = self.mk_scalar('*', self.need(h, 'bnd'), 0.5, True)
                e = self.mk_unary('exp', self.mk_scalar('-', a, 0.5, True))
                h = self.mk_scalar('*', e, 0.5, rng.random() < 0.5)
            elif step == 'sigmoid':
                if rng.random() < 0.5:
                    h = self.mk_unary('sigmoid', self.mk_scalar('*', self.need(h, 'bnd'), c_of(), True))
                else:
                    h = self.mk_unary('sigmoid', h)
            elif step == 'param_mul':
                w = self.chain_param(shape, 'bnd', pool)
                hb = self.need(h, 'bnd')
                h = self.mk_binary('*', *((w, hb) if rng.random() < 0.5 else (hb, w)))
            elif step == 'param_add':
                b = self.chain_param(shape, None, pool)
                op = rng.choice(['+', '+', '-'])
                h = self.mk_binary(op, *((h, b) if rng.random() < 0.6 else (b, h)))
            elif step == 'sig_mul':  # sigmoid(h) * w
                w = self.chain_param(shape, 'bnd', pool)
                h = self.mk_binary('*', self.mk_unary('sigmoid', h), w)
            elif step == 'skip':  # an earlier level read again (a shared sub-expression)
                prev = rng.choice(levels[:-1] or levels)
                if h.tree + prev.tree > CHAIN_TREE:
                    continue
                if rng.random() < 0.5:
                    h = self.mk_binary('+', h, prev)
                else:
                    h = self.mk_binary('*', self.need(h, 'bnd'), self.need(prev, 'bnd'))
            elif step == 'unary':
                op = rng.choice(['square', 'log', 'sqrt', 'neg', 'pow'])
                if op == 'pow':
                    h = self.mk_unary('pow', self.need(h, 'posb'), rng.choice([0.5, 2.0, -1.0, 1.5]))
                else:
                    h = self.mk_unary(op, self.need(h, UNARY[op][2]) if UNARY[op][2] else h)
            else:  # a broadcast bias or scale (a row, a column, a scalar), reused at levels
                if not shape:
                    continue
                dom = 'bnd' if step == 'scale_bcast' else None
                cands = [w for w in bpool if fits(dom, w.lo, w.hi)]
                if cands and rng.random() < 0.5:
                    b = rng.choice(cands)
                else:
                    breq = self.bcast_req([(e, False) for e, _ in shape])
                    if rng.random() < 0.15:
                        breq = []  # a rank-0 scalar
                    b = self.leaf(breq, dom)
                    if b.leaf is not None and rng.random() < 0.9:
                        self.leaves[b.leaf]['param'] = True
                    bpool.append(b)
                if step == 'scale_bcast':
                    hb = self.need(h, 'bnd')
                    h = self.mk_binary('*', *((hb, b) if rng.random() < 0.6 else (b, hb)))
                else:
                    h = self.mk_binary('+', *((h, b) if rng.random() < 0.7 else (b, h)))
            levels.append(h)
            assert self.satisfies(h, req), (h.shape, req)
        if h.shape and rng.random() < 0.3:  # the chain under a reduction
            if rng.random() < 0.5:
                axes = sorted(rng.sample(range(len(h.shape)), 1))
                return self.mk_reduce(rng.choice(['sum', 'mean']), h, axes, rng.random() < 0.3)
            return self.mk_reduce(rng.choice(['sum', 'mean']), h, list(range(len(h.shape))), False)
        return h

    def shared_expr(self, atoms, level, first=None):
        """An expression over the shared atoms: every operand reads one of them (first, when
        given, is read by the leftmost operand)."""
        rng = self.rng
        if level == 0:
            a = first or rng.choice(atoms)
            u = rng.random()
            if u < 0.45:
                return a
            if u < 0.8:
                op = rng.choice(['tanh', 'sigmoid', 'exp', 'square', 'log'])
                dom = UNARY[op][2]
                return self.mk_unary(op, self.need(a, dom) if dom else a)
            if a.shape:  # a reduction of it, broadcast back
                axes = self.pattern_axes(a)
                op = rng.choice(['sum', 'mean', 'max'])
                return self.mk_reduce(op, a, axes, True)
            return self.mk_scalar('*', a, 0.75, True)
        x = self.shared_expr(atoms, level - 1, first)
        y = self.shared_expr(atoms, rng.randint(0, level - 1), first if rng.random() < 0.6 else None)
        op = rng.choice(['+', '+', '-', '*', '*', '/'])
        if rng.random() < 0.5:
            x, y = y, x
        if op == '*':
            return self.mk_binary('*', self.need(x, 'bnd'), self.need(y, 'bnd'))
        if op == '/':
            return self.mk_binary('/', self.need(x, 'bnd'), self.need(y, 'pos'))
        return self.mk_binary(op, x, y)

    def read_twice(self, h, g):
        """g, or g + tanh(h) when g reads h only once."""
        reads = sum(len(re.findall(r'\b%s\b' % h.var, t.split('=', 1)[1])) for t in self.gx)
        return g if reads >= 2 else self.mk_binary('+', g, self.mk_unary('tanh', h))

    def build_shared(self):
        """The same sub-expression object read several times (h * h + tanh(h)), bare or in
        gx::saved(h), at one or two levels."""
        rng = self.rng
        req = self.root_req((0, 1, 2, 3), (2, 3, 5, 2))
        hreq = self.bcast_req(req) if req and rng.random() < 0.3 else req
        if rng.random() < 0.25 and hreq:
            h = self.gen_pattern(hreq, 1)
        else:
            h = None
        if h is None:
            h = self.sub(hreq, rng.randint(1, 3), 'bnd' if rng.random() < 0.6 else None, 2)
        if h.leaf is not None:
            h = self.mk_unary(rng.choice(['tanh', 'sigmoid']), h)
        saved = rng.random() < 0.55
        if saved:
            h = self.mk_saved(h)
        atoms = [h]
        if hreq != req or rng.random() < 0.4:  # a second operand of the root's extents
            z = self.leaf(req, 'bnd')
            atoms.append(z)
        for attempt in range(4):  # an expression whose type stays small (compile time)
            snap = self.snapshot()
            g = self.read_twice(h, self.shared_expr(atoms, rng.randint(1, 2), h))
            if g.tree <= SHARED_TREE_MAX or attempt == 3:
                break
            self.restore(snap)
        if not self.satisfies(g, req):
            g = self.mk_binary('+', g, self.leaf(req, None))
        if g.tree <= SHARED_TREE and rng.random() < 0.3:  # a second level: g and h read again
            if rng.random() < 0.4:
                g = self.mk_saved(g)
            g = self.read_twice(g, self.shared_expr([g, h], 1, g))
            if not self.satisfies(g, req):
                g = self.mk_binary('+', g, self.leaf(req, None))
        if g.shape and rng.random() < 0.25:
            return self.mk_reduce(rng.choice(['sum', 'mean', 'max']), g,
                                  list(range(len(g.shape))), False)
        return g

    # ---- model-shaped graphs (issue 32): products, norms, softmax over any axis, attention,
    # reductions broadcast back, values shared by gx::let and by plain reads
    def model_leaf(self, extents, lo, hi, param):
        """A leaf of the model family: dense gradient storage (products accumulate into it)."""
        rng = self.rng
        shape = [(e, rng.random() < 0.4) for e in extents]
        k = len(self.leaves)
        layout = rng.choice(['gx::row_major', 'gx::row_major', 'gx::col_major'])
        spec = 'gx::dense_grad<0>' if extents and rng.random() < 0.3 else None
        self.leaves.append(dict(shape=shape, lo=lo, hi=hi, layout=layout, param=param, spec=spec))
        nid = len(self.nodes)
        rv = 'r%d' % nid
        self.refl.append('auto %s = R.leaf(%d, {%s}, D.leaf[%d]);' % (
            rv, nid, ', '.join(str(e) for e in extents), k))
        node = Node(nid, 'x%d' % k, rv, shape, lo, hi, 0, leaf=k)
        self.nodes.append(node)
        return node

    def weight(self, extents):
        lo, hi = self.rng.choice([(-1.0, 1.0), (-0.5, 0.5), (-1.0, 0.5)])
        return self.model_leaf(extents, lo, hi, self.rng.random() < 0.85)

    @staticmethod
    def dyn(extents):
        return [(e, False) for e in extents]

    def model_linear(self, h):
        rng = self.rng
        D = h.extents[-1]
        D2 = rng.randint(2, 4)
        W = self.weight([D, D2])
        lo, hi = iv_binary('*', (h.lo, h.hi), (W.lo, W.hi))
        lo, hi = lo * D, hi * D
        out = h.extents[:-1] + [D2]
        if rng.random() < 0.5:
            b = self.weight([D2])
            n = self.add('gx::matmul(%s, %s) + %s' % (h.var, W.var, b.var),
                         'R.binary(@, rg::ADD, R.matmul(@, %s, %s), %s)' % (h.ref, W.ref, b.ref),
                         self.dyn(out), lo + b.lo, hi + b.hi, [h, W, b])
        else:
            n = self.add('gx::matmul(%s, %s)' % (h.var, W.var), 'R.matmul(@, %s, %s)' % (h.ref, W.ref),
                         self.dyn(out), lo, hi, [h, W])
        if rng.random() < 0.5:
            n = self.mk_unary(rng.choice(['tanh', 'sigmoid']), n)
        return n

    def model_norm(self, h):
        rng = self.rng
        D = h.extents[-1]
        rms = rng.random() < 0.4
        fn, eps = ('gx::rms_norm', '1e-6') if rms else ('gx::layer_norm', '1e-5')
        m = math.sqrt(D)
        ref = 'R.norm(@, %s, %s, %s)' % (h.ref, 'true' if rms else 'false', eps)
        if rng.random() < 0.5:
            return self.add('%s(%s)' % (fn, h.var), ref, h.shape, -m, m, [h])
        g = self.weight([D])
        lo, hi = iv_binary('*', (-m, m), (g.lo, g.hi))
        if rms:
            return self.add('%s(%s, %s)' % (fn, h.var, g.var), 'R.binary(@, rg::MUL, %s, %s)' % (ref, g.ref),
                            h.shape, lo, hi, [h, g])
        b = self.weight([D])
        return self.add('%s(%s, %s, %s)' % (fn, h.var, g.var, b.var),
                        'R.binary(@, rg::ADD, R.binary(@, rg::MUL, %s, %s), %s)' % (ref, g.ref, b.ref),
                        h.shape, lo + b.lo, hi + b.hi, [h, g, b])

    def model_softmax(self, h):
        rng = self.rng
        r = len(h.shape)
        a = rng.randrange(r)
        spelled = a - r if rng.random() < 0.3 else a
        log = rng.random() < 0.35
        n = h.extents[a]
        if log:
            return self.add('gx::log_softmax<%d>(%s)' % (spelled, h.var),
                            'R.softmax(@, %s, %d, true)' % (h.ref, a), h.shape,
                            h.lo - h.hi - math.log(n), 0.0, [h])
        return self.add('gx::softmax<%d>(%s)' % (spelled, h.var), 'R.softmax(@, %s, %d, false)' % (h.ref, a),
                        h.shape, 0.0, 1.0, [h])

    def model_center(self, h):
        """A reduction broadcast back into its operand: h - mean<A>(h), or h scaled by the root
        mean square along A."""
        rng = self.rng
        a = rng.randrange(len(h.shape))
        if rng.random() < 0.5:
            return self.add('%s - gx::mean<%d>(%s, gx::keep_dims)' % (h.var, a, h.var),
                            'R.binary(@, rg::SUB, %s, R.reduce(@, rg::RMEAN, %s, {%d}, true))' % (h.ref, h.ref, a),
                            h.shape, h.lo - h.hi, h.hi - h.lo, [h])
        m = max(abs(h.lo), abs(h.hi))
        return self.add('%s / gx::sqrt(gx::mean<%d>(gx::square(%s), gx::keep_dims) + 1.0)' % (h.var, a, h.var),
                        'R.binary(@, rg::DIV, %s, R.unary(@, rg::SQRT, R.binary(@, rg::ADD, '
                        'R.reduce(@, rg::RMEAN, R.unary(@, rg::SQUARE, %s), {%d}, true), 1.0)))' % (h.ref, h.ref, a),
                        h.shape, -m, m, [h])

    def model_residual(self, h):
        """h + tanh(h W) * h: h read three times, through gx::let or as a plain value."""
        D = h.extents[-1]
        W = self.weight([D, D])
        m = max(abs(h.lo), abs(h.hi))
        ref = 'R.binary(@, rg::ADD, %s, R.binary(@, rg::MUL, R.unary(@, rg::TANH, R.matmul(@, %s, %s)), %s))' % (
            h.ref, h.ref, W.ref, h.ref)
        if self.rng.random() < 0.6:
            expr = 'gx::let(%s, [&](auto v) { return v + gx::tanh(gx::matmul(v, %s)) * v; })' % (h.var, W.var)
        else:
            expr = '%s + gx::tanh(gx::matmul(%s, %s)) * %s' % (h.var, h.var, W.var, h.var)
        return self.add(expr, ref, h.shape, h.lo - m, h.hi + m, [h, W])

    def model_attention(self, h):
        """Self-attention of h (B, T, D) over T, causal or not, h shared by gx::let."""
        rng = self.rng
        c = fmt(rng.choice([0.5, 0.25, 1.0]))
        causal = rng.random() < 0.5
        scores = 'gx::matmul(v, gx::permute<0, 2, 1>(v)) * %s' % c
        rscores = 'R.binary(@, rg::MUL, R.matmul(@, %s, R.permute(@, %s, {0, 2, 1})), %s)' % (h.ref, h.ref, c)
        if causal:
            scores, rscores = 'gx::causal_mask(%s)' % scores, 'R.causal(@, %s)' % rscores
        expr = 'gx::let(%s, [&](auto v) { return gx::matmul(gx::softmax<2>(%s), v); })' % (h.var, scores)
        ref = 'R.matmul(@, R.softmax(@, %s, 2, false), %s)' % (rscores, h.ref)
        return self.add(expr, ref, h.shape, h.lo, h.hi, [h])

    def build_model(self):
        """A model-shaped graph: an input (T, D) or (B, T, D), two to four layers (a linear
        map, a norm, a softmax over any axis, a reduction broadcast back, a residual with a
        shared value, self-attention), and a loss over all of it or the output itself."""
        rng = self.rng
        rank = rng.choice([2, 3, 3])
        ext = [rng.randint(2, 4), rng.randint(2, 4)]
        if rank == 3:
            ext = [rng.randint(2, 3)] + ext
        lo, hi = rng.choice([(-1.0, 1.0), (-2.0, 2.0), (-1.0, 0.5)])
        h = self.model_leaf(ext, lo, hi, rng.random() < 0.5)
        for _ in range(rng.randint(2, 4)):
            kinds = [('linear', 3), ('norm', 2), ('softmax', 2), ('center', 2), ('residual', 2)]
            if len(h.shape) == 3:
                kinds.append(('attention', 2))
            k = rng.choices([a for a, _ in kinds], [w for _, w in kinds])[0]
            h = getattr(self, 'model_' + k)(h)
        if rng.random() < 0.5:
            return self.mk_reduce(rng.choice(['sum', 'mean']), h, list(range(len(h.shape))), False)
        return h

    # ---- a whole graph
    def build(self):
        rng = self.rng
        self.family = family_of(self.seed, self.gid)
        if self.family is not None:
            self.root = getattr(self, 'build_' + self.family)()
            self.target_depth = self.root.height
        else:
            self.build_regular()
        if self.root.leaf is not None:  # a bare leaf is no graph: add one operation
            self.root = self.mk_unary('tanh', self.root)
        if not any(l['param'] for l in self.leaves):
            self.leaves[rng.randrange(len(self.leaves))]['param'] = True
        r = len(self.root.shape)
        self.mode = rng.choice(['grad', 'grad', 'backward']) if r == 0 else \
            rng.choice(['grad', 'grad', 'seed'])
        self.w_static = rng.random() < 0.5

    def build_regular(self):
        rng = self.rng
        depth = rng.choices(range(1, MAX_DEPTH + 1), [1, 2, 3, 4, 5, 8])[0]
        r = rng.choices([0, 1, 2, 3], [2, 3, 5, 3])[0]
        for _ in range(20):
            ext = [rng.randint(1, 5) for _ in range(r)]
            if prod(ext) <= MAX_SIZE and (r == 0 or prod(ext) >= 2):
                break
        self.target_depth = depth
        self.root = self.gen([(e, False) for e in ext], depth)

    # ---- C++
    def text(self):
        lines = []
        for k, l in enumerate(self.leaves):
            lines.append(self.leaf_decl(k, l))
        for j, (kind, n, m, t) in enumerate(self.ints):
            if kind == 'ONE':
                lines.append('int const j%d = D.pos[%d];  // in [0, %d)' % (j, j, m))
            else:
                lines.append('auto const i%d = rg::indices_as<%s>(D.idx[%d]);  // %d %s in [0, %d)' % (
                    j, t, j, n, 'distinct indices' if kind == 'UNIQUE' else 'indices', m))
        return lines + self.gx

    def leaf_decl(self, k, l):
        shape = l['shape']
        ty = 'gx::tensor<double, gx::shape<%s>, %s>' % (
            ', '.join(str(e) if s else 'gx::dyn' for e, s in shape), l['layout'])
        init = '%s, rg::span(D.leaf[%d])' % (self.dims(shape), k)
        if l['param']:
            spec = (', ' + l['spec']) if l['spec'] else ''
            return 'auto x%d = gx::param(%s(%s)%s);  // values in [%g, %g)' % (
                k, ty, init, spec, l['lo'], l['hi'])
        return '%s x%d(%s);  // values in [%g, %g)' % (ty, k, init, l['lo'], l['hi'])

    def cpp(self):
        root = self.root
        params = [k for k, l in enumerate(self.leaves) if l['param']]
        nops = len([n for n in self.nodes if n.leaf is None])
        text = self.text()
        out = []
        w = out.append
        w('TEST_CASE("random graph %d:%d (%sdepth %d, %d operations, %d leaves)") {' % (
            self.seed, self.gid, self.family + ', ' if self.family else '', root.height, nops,
            len(self.leaves)))
        wsize = prod(root.extents) if root.shape else 0
        w('  rg::graph_info const G{%d, %d, R"RG(%s)RG",' % (self.seed, self.gid, '\n'.join(text)))
        w('      {%s},' % ', '.join('{%d, %s, %s}' % (prod(e for e, _ in l['shape']), fmt(l['lo']),
                                                     fmt(l['hi'])) for l in self.leaves))
        w('      {%s},' % ', '.join('{rg::int_spec::%s, %d, %d}' % (k, n, m)
                                    for k, n, m, _ in self.ints))
        w('      %d};' % wsize)
        w('  rg::graph_fn const f = [](rg::ref& R, rg::data const& D) -> rg::arr {')
        w('    (void)D;')
        for l in self.refl:
            w('    ' + l)
        w('    return %s;' % root.ref)
        w('  };')
        w('  rg::data const D = rg::sample(G, f);')
        w('  std::string const context = rg::describe(G, D);')
        w('  INFO(context);')
        w('  REQUIRE_MESSAGE(D.ok, D.why);')
        w('  rg::ref R0;')
        w('  rg::arr const expected = f(R0, D);')
        for l in text:
            w('  ' + l)
        if root.shape:
            w('  RG_CHECK_FORWARD(expected, rg::flat(gx::eval(%s)));' % root.var)
            wshape = root.shape if self.w_static else [(e, False) for e, _ in root.shape]
            wty = 'gx::tensor<double, gx::shape<%s>>' % ', '.join(
                str(e) if s else 'gx::dyn' for e, s in wshape)
            w('  %s const W(%s, rg::span(D.w));' % (wty, self.dims(wshape)))
        else:
            w('  RG_CHECK_FORWARD(expected, std::vector<double>{gx::value(%s)});' % root.var)
        pv = ', '.join('x%d' % k for k in params)
        w('  RG_CHECK_COST(%s);' % ('gx::sum(W * %s)' % root.var if root.shape else root.var))
        if self.mode == 'seed':
            w('  gx::backward(%s, W);' % root.var)
            for k in params:
                w('  RG_CHECK_GRAD(G, f, D, %d, x%d.grad().to_dense());' % (k, k))
        elif self.mode == 'backward':
            w('  RG_CHECK_FORWARD(expected, std::vector<double>{gx::backward(%s)});' % root.var)
            for k in params:
                w('  RG_CHECK_GRAD(G, f, D, %d, x%d.grad().to_dense());' % (k, k))
        else:
            loss = 'gx::sum(W * %s)' % root.var if root.shape else root.var
            w('  auto const g = gx::grad(%s, %s);' % (loss, pv))
            for i, k in enumerate(params):
                gi = 'g' if len(params) == 1 else 'std::get<%d>(g)' % i
                w('  RG_CHECK_GRAD(G, f, D, %d, %s.to_dense());' % (k, gi))
        w('}')
        return '\n'.join(out)


HEADER = '''// Generated by tools/gen_random_graphs.py --seed %d (graphs %d..%d of %d); do not edit.
// See the script's header for what is random, the domains and kinks, and the checks.
#include "random/random_graph.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gx = gradix;

'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--count', type=int, default=200)
    ap.add_argument('--only', type=int, default=None, help='print graph ONLY to stdout')
    ap.add_argument('outputs', nargs='*')
    a = ap.parse_args()
    if a.only is not None:
        g = Graph(a.seed, a.only)
        g.build()
        print(g.cpp())
        return
    if not a.outputs:
        ap.error('give output files (or --only)')
    nf = len(a.outputs)
    per = (a.count + nf - 1) // nf if nf else 0
    for f, path in enumerate(a.outputs):
        lo, hi = f * per, min(a.count, (f + 1) * per)
        body = []
        for gid in range(lo, hi):
            g = Graph(a.seed, gid)
            g.build()
            body.append(g.cpp())
        with open(path, 'w') as fh:
            fh.write(HEADER % (a.seed, lo, hi - 1, a.count))
            fh.write('\n\n'.join(body) + '\n')


if __name__ == '__main__':
    main()
