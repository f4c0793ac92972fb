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
operations, their nesting (depth up to 6, with shared sub-expressions and parameters used
more than once), every extent, which extents are static, leaf layouts, which leaves are
parameters and their gradient storage (dense/sparse, along which axis), the number of
indices of each index vector, ranges (start, stop, step), reduction axes, permutations,
reshape targets. Everything else comes from the run-time seed (tests/random/ref.hpp: the
--random-seed=N flag or GRADIX_RANDOM_SEED, default 1): leaf values, the index values of
index vectors (with at least one repeated index per vector of two or more, or all distinct
for `unique`), and the positions of at(j) / select.

Operation families: elementwise unary (neg, exp, log, sqrt, tanh, sigmoid, relu, abs,
square, pow with a scalar exponent, arithmetic and max/min with a scalar), binary (+ - * /
max min pow) with broadcasting (static extent 1 axes and missing leading axes, rank-0
operands), reductions (sum/mean/max over all axes or over chosen axes, negative axes,
keep_dims), index ops (gather with index vectors of several element types, unique(...),
ranges and slices with positive and negative steps, at(j), select, several axes at once
through E(...) on leaves and gx::index(e, ...)), views (transpose/permute, unsqueeze,
reshape, broadcast_to).

Staying inside the domains, away from the kinks
-----------------------------------------------
- Domains by interval arithmetic at build time: every node carries a sound interval
  [lo, hi] for its values, from the intervals its leaves are drawn from. An operation with a
  domain asks its operand for one: log, sqrt and the divisor of `/` need values >= 0.2;
  pow needs a base in [0.2, 4] and an exponent in [-2, 2]; exp, square and both factors of
  `*` (and the dividend of `/`) need |values| <= 3 (this also bounds every value, so
  gradients stay moderate). A leaf is drawn from an interval that satisfies the request; an
  inner node that does not is wrapped in a guard, which is part of the graph (it counts in
  the depth): e.g. log(sigmoid(x) + 0.5), sqrt(square(x) + 0.5), exp(tanh(x)), exp(x) for a
  bounded x, tanh(x), x * 0.25.
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
backward pass for its own types, about 0.7-1 s of -O1 code generation per graph.
"""

import argparse
import math
import random

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
        shape = []
        for k, (e, s) in enumerate(x.shape):
            if k in axes:
                if keep:
                    shape.append((1, True))
            else:
                shape.append((e, s))
        cnt = prod(x.extents[k] for k in axes)
        lo, hi = (x.lo * cnt, x.hi * cnt) if op == 'sum' else (x.lo, x.hi)
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

    # ---- a whole graph
    def build(self):
        rng = self.rng
        depth = rng.choices(range(1, MAX_DEPTH + 1), [1, 2, 3, 4, 5, 8])[0]
        r = rng.choices([0, 1, 2, 3], [2, 3, 5, 3])[0]
        for _ in range(20):
            ext = [rng.randint(1, 5) for _ in range(r)]
            if prod(ext) <= MAX_SIZE and (r == 0 or prod(ext) >= 2):
                break
        self.target_depth = depth
        self.root = self.gen([(e, False) for e in ext], depth)
        if self.root.leaf is not None:  # a bare leaf is no graph: add one operation
            self.root = self.mk_unary('tanh', self.root)
        if not any(l['param'] for l in self.leaves):
            self.leaves[rng.randrange(len(self.leaves))]['param'] = True
        r = len(self.root.shape)
        self.mode = rng.choice(['grad', 'grad', 'backward']) if r == 0 else \
            rng.choice(['grad', 'grad', 'seed'])
        self.w_static = rng.random() < 0.5

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
        w('TEST_CASE("random graph %d:%d (depth %d, %d operations, %d leaves)") {' % (
            self.seed, self.gid, root.height, nops, len(self.leaves)))
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
