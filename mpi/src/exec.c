/* ReduceLab MPI runtime: executes one rank's program of a schedule (crates/sched, through the
 * C ABI of crates/capi) over nonblocking MPI point-to-point.
 *
 * Execution of a step (the IR's contract, docs/schedules.md): post every receive (into scratch,
 * or straight into the user buffer for a copy of one contiguous range no other transfer of the
 * step touches), post every send (from the user buffer, or packed into scratch when the blocks
 * are not contiguous), wait for all of them, then apply the receives in the order listed.
 * Messages of zero elements are skipped on both sides (both sides compute the same sizes).
 *
 * All internal communication uses PMPI_* on a duplicate of the user's communicator (cached as
 * an attribute) with a per-call tag from a per-communicator sequence number, so it never
 * matches the application's messages and concurrent nonblocking operations do not mix. */
#define _GNU_SOURCE
#include "rl_exec.h"
#include "rl_algorithms.h"
#include "rl_comm.h"
#include "rl_progress.h"
#include "rl_shm.h"
#include "rl_threads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t elem_lo(const rl_exec *ex, uint32_t block) {
    return (size_t)((unsigned __int128)block * ex->count / ex->prog->blocks);
}
static const uint32_t *ranges_of(const rl_exec *ex, const RlTransfer *t) { return ex->prog->ranges + 2 * t->first_range; }
static size_t xfer_elems(const rl_exec *ex, const RlTransfer *t) {
    const uint32_t *r = ranges_of(ex, t);
    size_t n = 0;
    for (uint32_t i = 0; i < t->nranges; i++) n += elem_lo(ex, r[2 * i + 1]) - elem_lo(ex, r[2 * i]);
    return n;
}
/* Bytes spanned by n consecutive elements (the last one up to its true upper bound). */
size_t rl_span(const rl_exec *ex, size_t n) { return n ? (n - 1) * (size_t)ex->extent + (size_t)ex->true_ub : 0; }

/* Blocks [b, e) split into runs of equal freshness: the end of the run starting at b. */
static uint32_t run_end(const rl_exec *ex, uint32_t b, uint32_t e) {
    if (!ex->src) return e;
    uint32_t k = b + 1;
    while (k < e && ex->fresh[k] == ex->fresh[b]) k++;
    return k;
}
static const char *base_of(const rl_exec *ex, uint32_t b) { return ex->src && ex->fresh[b] ? ex->src : ex->buf; }
static void mark_written(rl_exec *ex, uint32_t b, uint32_t e) {
    if (ex->src) memset(ex->fresh + b, 0, e - b);
}

/* Scratch bytes step s needs. */
size_t rl_step_scratch(const rl_exec *ex, const RlStep *st) {
    size_t b = 0;
    for (uint32_t k = 0; k < st->nsends + st->nrecvs; k++) {
        const RlTransfer *t = &ex->prog->transfers[st->first + k];
        int needs = t->op == RL_SEND ? (t->nranges > 1 || ex->src) : !t->direct;
        if (needs) b += xfer_elems(ex, t) * (size_t)ex->extent;
    }
    return b;
}

size_t rl_max_step_transfers(const RlProgram *p) {
    size_t m = 0;
    for (uint32_t s = 0; s < p->nsteps; s++)
        if (p->steps[s].nsends + p->steps[s].nrecvs > m) m = p->steps[s].nsends + p->steps[s].nrecvs;
    return m;
}

/* Segments of a transfer of n elements (both sides compute the same split). */
static size_t nsegs(const rl_exec *ex, size_t n) { return n ? (n - 1) / ex->seg + 1 : 0; }

int rl_reserve_reqs(rl_exec *ex, size_t n) {
    if (n <= ex->reqcap) return MPI_SUCCESS;
    MPI_Request *r = realloc(ex->reqs, n * sizeof *r);
    if (r) ex->reqs = r;
    MPI_Status *sts = realloc(ex->stats, n * sizeof *sts);
    if (sts) ex->stats = sts;
    size_t *rn = realloc(ex->req_n, n * sizeof *rn);
    if (rn) ex->req_n = rn;
    uint32_t *k = realloc(ex->req_xfer, n * sizeof *k);
    if (k) ex->req_xfer = k;
    int *i = realloc(ex->idx, n * sizeof *i);
    if (i) ex->idx = i;
    if (!r || !k || !i || !sts || !rn) return MPI_ERR_NO_MEM;
    ex->reqcap = n;
    return MPI_SUCCESS;
}

static int ranges_overlap(const rl_exec *ex, const RlTransfer *x, const RlTransfer *y) {
    const uint32_t *a = ranges_of(ex, x), *b = ranges_of(ex, y);
    for (uint32_t i = 0; i < x->nranges; i++)
        for (uint32_t j = 0; j < y->nranges; j++)
            if (a[2 * i] < b[2 * j + 1] && b[2 * j] < a[2 * i + 1]) return 1;
    return 0;
}

/* Receive segments may be applied as they arrive (instead of all at the end, in order) when
 * the op is commutative and no two transfers of the step touch the same block. */
static int step_allows_eager(const rl_exec *ex, const RlStep *st) {
    if (!ex->commute) return 0;
    const RlTransfer *t = &ex->prog->transfers[st->first];
    for (uint32_t k = st->nsends; k < st->nsends + st->nrecvs; k++)
        for (uint32_t j = 0; j < st->nsends + st->nrecvs; j++)
            if (j != k && ranges_overlap(ex, &t[k], &t[j])) return 0;
    return 1;
}

static int post_step(rl_exec *ex) {
    const RlStep *st = &ex->prog->steps[ex->step];
    size_t off = 0, need = 0;
    int rc;
    ex->nreqs = 0;
    for (uint32_t k = 0; k < st->nsends + st->nrecvs; k++)
        need += nsegs(ex, xfer_elems(ex, &ex->prog->transfers[st->first + k]));
    if ((rc = rl_reserve_reqs(ex, need + 1)) != MPI_SUCCESS) return rc;
    /* receives first, so that a peer's eager send finds them posted */
    for (uint32_t k = st->nsends; k < st->nsends + st->nrecvs; k++) {
        const RlTransfer *t = &ex->prog->transfers[st->first + k];
        size_t n = xfer_elems(ex, t);
        ex->offs[k] = off;
        if (n == 0) continue;
        char *dst = t->direct ? ex->buf + elem_lo(ex, ranges_of(ex, t)[0]) * ex->extent : ex->scratch + off;
        if (!t->direct) off += n * (size_t)ex->extent;
        for (size_t j = 0, ns = nsegs(ex, n); j < ns; j++) {
            size_t m = j + 1 < ns ? ex->seg : n - j * ex->seg;
            ex->req_xfer[ex->nreqs] = k;
            ex->req_n[ex->nreqs] = m;
            rc = PMPI_Irecv(dst + j * ex->seg * (size_t)ex->extent, (int)m, ex->type, (int)t->peer, ex->tag, ex->comm,
                            &ex->reqs[ex->nreqs++]);
            if (rc != MPI_SUCCESS) return rc;
        }
    }
    for (uint32_t k = 0; k < st->nsends; k++) {
        const RlTransfer *t = &ex->prog->transfers[st->first + k];
        size_t n = xfer_elems(ex, t);
        if (n == 0) continue;
        const uint32_t *r = ranges_of(ex, t);
        const char *src;
        if (t->nranges == 1 && run_end(ex, r[0], r[1]) == r[1]) {
            src = base_of(ex, r[0]) + elem_lo(ex, r[0]) * ex->extent;
        } else {
            src = ex->scratch + off;
            size_t o = off;
            for (uint32_t i = 0; i < t->nranges; i++)
                for (uint32_t b = r[2 * i], e; b < r[2 * i + 1]; b = e) {
                    e = run_end(ex, b, r[2 * i + 1]);
                    size_t lo = elem_lo(ex, b), m = elem_lo(ex, e) - lo;
                    memcpy(ex->scratch + o, base_of(ex, b) + lo * ex->extent, rl_span(ex, m));
                    o += m * (size_t)ex->extent;
                }
            off += n * (size_t)ex->extent;
        }
        for (size_t j = 0, ns = nsegs(ex, n); j < ns; j++) {
            size_t m = j + 1 < ns ? ex->seg : n - j * ex->seg;
            ex->req_xfer[ex->nreqs] = UINT32_MAX;
            rc = PMPI_Isend((void *)(src + j * ex->seg * (size_t)ex->extent), ex->err ? 0 : (int)m, ex->type, (int)t->peer, ex->tag,
                            ex->comm, &ex->reqs[ex->nreqs++]);
            if (rc != MPI_SUCCESS) return rc;
        }
    }
    return MPI_SUCCESS;
}

/* local = in ⊕ local, where local's current value is at `cur` (buf, or the input). */
static int reduce_into(rl_exec *ex, const char *in, const char *cur, char *local, size_t m) {
    if (ex->kernel) {
        ex->kernel(in, cur, local, m);
        return MPI_SUCCESS;
    }
    if (cur != local) memcpy(local, cur, rl_span(ex, m));
    return PMPI_Reduce_local((void *)in, local, (int)m, ex->type, ex->op);
}

/* Applies the elements [plo, phi) (positions in the message) of receive k of the current step. */
static int apply_recv(rl_exec *ex, uint32_t k, size_t plo, size_t phi) {
    const RlStep *st = &ex->prog->steps[ex->step];
    const RlTransfer *t = &ex->prog->transfers[st->first + k];
    if (t->direct) return MPI_SUCCESS;
    const uint32_t *r = ranges_of(ex, t);
    size_t pos = 0;
    for (uint32_t i = 0; i < t->nranges && pos < phi; i++)
        for (uint32_t b = r[2 * i], e; b < r[2 * i + 1] && pos < phi; b = e) {
            e = run_end(ex, b, r[2 * i + 1]);
            size_t lo = elem_lo(ex, b), m = elem_lo(ex, e) - lo;
            size_t s0 = pos > plo ? pos : plo, s1 = pos + m < phi ? pos + m : phi;
            if (s0 < s1) {
                size_t first = lo + (s0 - pos), cnt = s1 - s0;
                char *local = ex->buf + first * ex->extent, *in = ex->scratch + ex->offs[k] + s0 * (size_t)ex->extent;
                const char *cur = base_of(ex, b) + first * ex->extent;
                int rc = MPI_SUCCESS;
                if (t->op == RL_RECV_COPY) {
                    memcpy(local, in, rl_span(ex, cnt));
                } else if (t->op == RL_RECV_REDUCE_INCOMING_FIRST || ex->commute) {
                    rc = reduce_into(ex, in, cur, local, cnt); /* local = in ⊕ local */
                } else {
                    rc = PMPI_Reduce_local((void *)cur, in, (int)cnt, ex->type, ex->op); /* in = local ⊕ in */
                    memcpy(local, in, rl_span(ex, cnt));
                }
                if (rc != MPI_SUCCESS) return rc;
            }
            pos += m;
        }
    return MPI_SUCCESS;
}

/* After receive k is applied completely: its blocks now live in buf. */
static void mark_recv_written(rl_exec *ex, uint32_t k) {
    const RlTransfer *t = &ex->prog->transfers[ex->prog->steps[ex->step].first + k];
    const uint32_t *r = ranges_of(ex, t);
    for (uint32_t i = 0; i < t->nranges; i++) mark_written(ex, r[2 * i], r[2 * i + 1]);
}

/* Applies every receive of the step in order (after all its transfers completed); a later
 * receive of the same block sees the earlier one's result. */
static int finish_step(rl_exec *ex) {
    const RlStep *st = &ex->prog->steps[ex->step];
    for (uint32_t k = st->nsends; k < st->nsends + st->nrecvs; k++) {
        int rc = apply_recv(ex, k, 0, xfer_elems(ex, &ex->prog->transfers[st->first + k]));
        if (rc != MPI_SUCCESS) return rc;
        mark_recv_written(ex, k);
    }
    return MPI_SUCCESS;
}

/* Receive request q completed with status st (rc: what the wait returned). Sets ex->err when
 * it was truncated or shorter than this rank's count implies: counts differ across ranks.
 * Returns another MPI error, if any. */
static int verify_recv(rl_exec *ex, int q, MPI_Status *st, int rc) {
    if (ex->req_xfer[q] == UINT32_MAX) return rc == MPI_ERR_IN_STATUS ? st->MPI_ERROR : MPI_SUCCESS;
    if (rc == MPI_ERR_IN_STATUS && st->MPI_ERROR != MPI_SUCCESS) {
        int cls = st->MPI_ERROR;
        PMPI_Error_class(st->MPI_ERROR, &cls);
        if (cls != MPI_ERR_TRUNCATE) return st->MPI_ERROR;
        ex->err = MPI_ERR_TRUNCATE;
        return MPI_SUCCESS;
    }
    int got = -1;
    if (PMPI_Get_count(st, ex->type, &got) != MPI_SUCCESS || got < 0 || (size_t)got != ex->req_n[q])
        ex->err = MPI_ERR_TRUNCATE;
    return MPI_SUCCESS;
}

/* After a Waitall/Testall over every request of the step that returned rc. */
static int verify_all(rl_exec *ex, int rc) {
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
    int first = MPI_SUCCESS;
    for (int q = 0; q < ex->nreqs; q++) {
        if (rc == MPI_ERR_IN_STATUS && ex->stats[q].MPI_ERROR == MPI_ERR_PENDING) {
            int e = PMPI_Wait(&ex->reqs[q], &ex->stats[q]); /* not completed yet: finish it */
            if (e != MPI_SUCCESS && ex->stats[q].MPI_ERROR == MPI_ERR_PENDING) ex->stats[q].MPI_ERROR = e;
        }
        int e = verify_recv(ex, q, &ex->stats[q], rc);
        if (e != MPI_SUCCESS && first == MPI_SUCCESS) first = e;
    }
    return first;
}

/* Waits for the step's transfers, applying receive segments as they arrive when allowed. */
static int wait_and_finish_step(rl_exec *ex) {
    const RlStep *st = &ex->prog->steps[ex->step];
    if (ex->nreqs == 0) return finish_step(ex);
    if (ex->seg == SIZE_MAX || !step_allows_eager(ex, st)) {
        int rc = verify_all(ex, rl_wait_all_progressing(ex->nreqs, ex->reqs, ex->stats));
        return rc != MPI_SUCCESS || ex->err ? rc : finish_step(ex);
    }
    /* segment index of request q within its transfer: requests of one transfer are consecutive */
    for (;;) {
        int outcount = 0;
        int rc = rl_wait_some_progressing(ex->nreqs, ex->reqs, &outcount, ex->idx, ex->stats);
        if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
        if (outcount == MPI_UNDEFINED) break;
        for (int i = 0; i < outcount; i++) {
            int q = ex->idx[i];
            uint32_t k = ex->req_xfer[q];
            int e = verify_recv(ex, q, &ex->stats[i], rc);
            if (e != MPI_SUCCESS) return e;
            if (k == UINT32_MAX || ex->err) continue;
            int q0 = q;
            while (q0 > 0 && ex->req_xfer[q0 - 1] == k) q0--;
            size_t n = xfer_elems(ex, &ex->prog->transfers[st->first + k]);
            size_t lo = (size_t)(q - q0) * ex->seg, hi = lo + ex->seg < n ? lo + ex->seg : n;
            if ((rc = apply_recv(ex, k, lo, hi)) != MPI_SUCCESS) return rc;
        }
    }
    /* segments of one run were applied separately: mark only now (no receive overlaps another) */
    const RlStep *st2 = &ex->prog->steps[ex->step];
    for (uint32_t k = st2->nsends; k < st2->nsends + st2->nrecvs; k++) mark_recv_written(ex, k);
    return MPI_SUCCESS;
}

/* Copies n elements of the execution's type from src to dst. Dense types: one memmove. Types
 * with holes: packed and unpacked by the type map (in pieces of about 1 MiB), so only the
 * bytes the type covers are written. */
static int typed_copy(char *dst, const char *src, size_t n, const rl_exec *ex) {
    if (!n) return MPI_SUCCESS;
    if (ex->dense) {
        memmove(dst, src, rl_span(ex, n));
        return MPI_SUCCESS;
    }
    size_t per = ((size_t)1 << 20) / (size_t)ex->tsize;
    if (per == 0) per = 1;
    if (per > n) per = n;
    int psize = 0, rc = PMPI_Pack_size((int)per, ex->type, MPI_COMM_SELF, &psize);
    if (rc != MPI_SUCCESS) return rc;
    char *tmp = malloc(psize > 0 ? (size_t)psize : 1);
    if (!tmp) return MPI_ERR_NO_MEM;
    for (size_t i = 0; i < n && rc == MPI_SUCCESS; i += per) {
        int m = (int)(n - i < per ? n - i : per), pos = 0, upos = 0;
        rc = PMPI_Pack(src + i * (size_t)ex->extent, m, ex->type, tmp, psize, &pos, MPI_COMM_SELF);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Unpack(tmp, pos, &upos, dst + i * (size_t)ex->extent, m, ex->type, MPI_COMM_SELF);
    }
    free(tmp);
    return rc;
}

static int exec_epilogue(rl_exec *ex) {
    int rc = MPI_SUCCESS;
    if (ex->src) /* blocks never written: the result is the input (e.g. p = 1) */
        for (uint32_t b = 0; b < ex->prog->blocks; b++) {
            size_t lo = elem_lo(ex, b), hi = elem_lo(ex, b + 1);
            if (lo < ex->final_lo) lo = ex->final_lo;
            if (hi > ex->final_hi) hi = ex->final_hi;
            if (ex->fresh[b] && lo < hi) memcpy(ex->buf + lo * ex->extent, ex->src + lo * ex->extent, rl_span(ex, hi - lo));
        }
    if (ex->out && ex->out_n) rc = typed_copy(ex->out, ex->buf + ex->out_from, ex->out_n, ex);
    free(ex->work);
    ex->work = NULL;
    if (ex->own_scratch && !ex->keep_scratch) {
        free(ex->scratch);
        ex->scratch = NULL;
    }
    return rc;
}

/* Tags: the per-communicator sequence number (concurrent operations never mix) and, where the
 * MPI library allows tags up to 2^31-1, a hash of (count, type size) in bits 16-30, so that
 * ranks called with different counts never match each other's messages. Without it a
 * mismatch returns wrong data, or worse: Open MPI 4.1 writes a truncated rendezvous receive
 * past the end of the buffer. The hash is count + 7919·size mod 32749 (+1), so counts that
 * differ by less than 32749 never collide. Such a call waits forever, as the MPI library's
 * own collectives may; REDUCELAB_CHECK=1 turns it into MPI_ERR_TRUNCATE on every rank (see
 * check_load). The count check uses the bare sequence number (hash field 0). */

void rl_next_tag(rl_exec *ex, comm_state *cs) {
    unsigned seq = cs->seq++;
    if (cs->tag_ub >= 0x7fffffff) {
        uint64_t h = ((uint64_t)ex->count + 7919u * (uint64_t)ex->tsize) % 32749u + 1u;
        ex->tag_base = (int)(seq & 0xffffu);
        ex->tag = ex->tag_base | (int)(h << 16);
    } else {
        ex->tag = ex->tag_base = (int)(seq % ((unsigned)cs->tag_ub + 1u));
    }
}

/* ---- count check (REDUCELAB_CHECK=1) ----
 * Before the schedule, a latency-schedule allreduce (MAX) of (count, -count, type size,
 * -type size), 33 bytes on every rank (the same size whatever the counts, so nothing is ever
 * truncated), on the bare sequence-number tag: every rank learns whether all agree and, if
 * not, skips the schedule and returns MPI_ERR_TRUNCATE (what Open MPI reports for a count
 * mismatch it detects). It costs one small allreduce per call, so it is off by default. */
#define CHK_BYTES 33
static MPI_Datatype chk_type = MPI_DATATYPE_NULL;

static void chk_kernel(const void *a, const void *b, void *out, size_t n) {
    for (size_t k = 0; k < n; k++) {
        int64_t x[4], y[4];
        memcpy(x, (const char *)a + k * CHK_BYTES, sizeof x);
        memcpy(y, (const char *)b + k * CHK_BYTES, sizeof y);
        for (int i = 0; i < 4; i++)
            if (x[i] > y[i]) y[i] = x[i];
        memcpy((char *)out + k * CHK_BYTES, y, sizeof y);
        ((char *)out)[k * CHK_BYTES + 32] = 0;
    }
}

static void check_load(rl_exec *ex) {
    rl_exec *c = ex->check;
    int64_t v[4] = {(int64_t)ex->count, -(int64_t)ex->count, ex->tsize, -(int64_t)ex->tsize};
    memcpy(ex->chk_in, v, sizeof v);
    ex->chk_in[32] = 0;
    c->buf = (char *)ex->chk_out;
    c->src = (const char *)ex->chk_in;
    memset(c->fresh, 1, c->prog->blocks);
    c->tag = ex->tag_base;
    c->err = 0;
    c->step = 0;
    c->posted = 0;
    ex->check_done = 0;
}

/* After the check ran: 1 if every rank has this rank's count and type size. */
static int check_agrees(const rl_exec *ex) {
    int64_t v[4];
    memcpy(v, ex->chk_out, sizeof v);
    return !ex->check->err && v[0] == (int64_t)ex->count && v[1] == -(int64_t)ex->count && v[2] == ex->tsize &&
           v[3] == -(int64_t)ex->tsize;
}

int rl_run_blocking(rl_exec *ex) {
    int rc = MPI_SUCCESS, skip = 0;
    ex->err = 0;
    if (ex->check) {
        check_load(ex);
        rc = rl_run_blocking(ex->check);
        if (rc == MPI_SUCCESS && !check_agrees(ex)) ex->err = MPI_ERR_TRUNCATE, skip = 1; /* every rank knows */
    }
    /* a mismatch found by message sizes (ex->err) does not stop the steps: see rl_exec.err */
    for (ex->step = 0; !skip && ex->step < ex->prog->nsteps && rc == MPI_SUCCESS; ex->step++) {
        rc = post_step(ex);
        if (rc == MPI_SUCCESS) rc = wait_and_finish_step(ex);
    }
    int erc = exec_epilogue(ex);
    return rc != MPI_SUCCESS ? rc : erc != MPI_SUCCESS ? erc : ex->err;
}

/* Advances a nonblocking execution as far as it can without blocking; 1 when complete. */
static int progress_exec(rl_exec *ex, int *err) {
    *err = MPI_SUCCESS;
    if (ex->comm == MPI_COMM_NULL && ex->cs) { /* the communicator's duplicate is still pending */
        if (!rl_comm_ready_locked(ex->cs)) return 0;
        ex->comm = ex->cs->dup;
        if (ex->check) ex->check->comm = ex->comm;
        rl_progress_moved();
    }
    if (ex->shm) return rl_shm_op_progress(ex->shm, ex->comm, err);
    if (ex->check && !ex->check_done) {
        int e;
        if (!progress_exec(ex->check, &e)) return 0;
        ex->check_done = 1;
        if (e == MPI_SUCCESS && !check_agrees(ex)) e = MPI_ERR_TRUNCATE;
        if (e != MPI_SUCCESS) {
            ex->err = e;
            *err = e;
            return 1;
        }
    }
    while (ex->step < ex->prog->nsteps) {
        if (!ex->posted) {
            if ((*err = post_step(ex)) != MPI_SUCCESS) return 1;
            ex->posted = 1;
        }
        int flag = 1;
        if (ex->nreqs) {
            int rc = PMPI_Testall(ex->nreqs, ex->reqs, &flag, ex->stats);
            if (rc == MPI_SUCCESS && !flag) return 0;
            if ((*err = verify_all(ex, rc)) != MPI_SUCCESS) return 1;
        }
        ex->posted = 0;
        rl_progress_moved();
        if (!ex->err && (*err = finish_step(ex)) != MPI_SUCCESS) return 1;
        ex->step++;
    }
    *err = ex->err;
    return 1;
}

/* Scratch for blocking calls, kept between calls (large allocations are mmap'ed and page
 * faulting them on every call costs as much as a reduction). */
char *rl_shared_scratch;
size_t rl_shared_scratch_bytes;

void rl_exec_free(rl_exec *ex) {
    if (!ex) return;
    free(ex->work);
    if (ex->own_scratch) free(ex->scratch);
    rl_exec_free(ex->check);
    free(ex->reqs);
    free(ex->stats);
    free(ex->req_n);
    free(ex->req_xfer);
    free(ex->idx);
    free(ex->offs);
    free(ex->fresh);
    rl_shm_op_free(ex->shm);
    free(ex);
}

/* ---- on the active list (progress.c) ---- */

static int exec_advance(rl_active *op, int *err) { return progress_exec((rl_exec *)op, err); }

/* Completed (rl_mu held): the run's epilogue, its result recorded (for its request's query
 * function, or a persistent plan's wait and test); an execution with a request is freed here
 * (progress.c then completes the request), a persistent plan's stays. */
static int exec_complete(rl_active *op, int err) {
    rl_exec *ex = (rl_exec *)op;
    int erc = exec_epilogue(ex);
    if (err == MPI_SUCCESS) err = erc;
    ex->result = err;
    if (ex->greq_err) *ex->greq_err = err;
    ex->done = 1;
    comm_state *cs = ex->cs;
    if (cs && cs->orphaned) ex->cs = NULL; /* a persistent plan must not keep it */
    rl_comm_state_release(cs);
    if (ex->node.greq != MPI_REQUEST_NULL) rl_exec_free(ex);
    return err;
}

static const rl_active_ops exec_ops = {exec_advance, exec_complete};

/* st's communicator is being freed: active operations not yet bound to its duplicate (ready by
 * now) are bound. */
static void bind_waiting(comm_state *st) {
    rl_lock();
    for (rl_active *op = rl_active_list(); op; op = op->next) {
        rl_exec *e = (rl_exec *)op;
        if (op->ops == &exec_ops && e->cs == st && e->comm == MPI_COMM_NULL) {
            e->comm = st->dup;
            if (e->check) e->check->comm = e->comm;
        }
    }
    rl_unlock();
}

int rl_exec_activate(rl_exec *ex) {
    rl_comm_hook_bind(bind_waiting);
    rl_lock();
    if (ex->cs) ex->cs->users++;
    ex->node.ops = &exec_ops;
    int rc = rl_activate_locked(&ex->node);
    rl_unlock();
    return rc;
}

/* The count check of an execution (see check_load), on recursive doubling's (or Swing's, for
 * the Swing names) latency schedule; NULL if none can be built. */
rl_exec *rl_make_check(const rl_exec *main, const char *algorithm, const uint32_t *dims, size_t ndims,
                       uint32_t rank) {
    if (chk_type == MPI_DATATYPE_NULL) {
        if (PMPI_Type_contiguous(CHK_BYTES, MPI_BYTE, &chk_type) != MPI_SUCCESS) return NULL;
        PMPI_Type_commit(&chk_type);
    }
    const char *name = algorithm && *algorithm ? algorithm : getenv("REDUCELAB_ALLREDUCE");
    const char *lat = name && strncmp(name, "swing", 5) == 0 ? "swing-latency" : "recursive-doubling-latency";
    char err[512];
    const RlProgram *prog = NULL;
    uint32_t line = main->prog->ranks;
    if (rl_get_program(lat, RL_COLL_ALLREDUCE, dims, ndims, rank, &prog, err, sizeof err) != 0 &&
        rl_get_program("recursive-doubling-latency", RL_COLL_ALLREDUCE, &line, 1, rank, &prog, err, sizeof err) != 0)
        return NULL;
    rl_exec *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->prog = prog;
    c->comm = main->comm;
    c->count = 1;
    c->type = chk_type;
    c->extent = c->true_ub = CHK_BYTES;
    c->tsize = CHK_BYTES;
    c->dense = 1;
    c->op = MPI_MAX;
    c->kernel = chk_kernel;
    c->commute = 1;
    c->maxx = rl_max_step_transfers(prog);
    c->offs = calloc(c->maxx + 1, sizeof *c->offs);
    c->fresh = calloc(prog->blocks + 1, 1);
    c->seg = SIZE_MAX;
    c->final_hi = 1;
    c->own_scratch = c->keep_scratch = 1;
    c->src = (const char *)1; /* size the scratch as rl_prepare does */
    size_t need = 0;
    for (uint32_t s = 0; s < prog->nsteps; s++) {
        size_t b = rl_step_scratch(c, &prog->steps[s]);
        if (b > need) need = b;
    }
    c->src = NULL;
    c->scratch = malloc(need ? need : 1);
    if (!c->offs || !c->fresh || !c->scratch || rl_reserve_reqs(c, c->maxx + 1) != MPI_SUCCESS) {
        rl_exec_free(c);
        return NULL;
    }
    return c;
}

/* A private working vector of `bytes` for a type with holes (ex->work, also ex->buf). On
 * failure `ex` is freed and the communicator's error handler called. */
int rl_alloc_work(rl_exec *ex, size_t bytes, MPI_Comm comm) {
    ex->work = malloc(bytes ? bytes : 1);
    if (!ex->work) {
        rl_exec_free(ex);
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    ex->buf = ex->work;
    return MPI_SUCCESS;
}

/* Sets up an allreduce's buffers: the result is built in recvbuf, reading blocks from the input
 * until first written (see rl_exec). A type with holes works on a private vector instead,
 * copied into recvbuf by the type map at the end (gaps in recvbuf are never written). */
int rl_load_allreduce(rl_exec *ex, const void *sendbuf, void *recvbuf) {
    ex->err = 0;
    if (ex->check) check_load(ex);
    ex->out = NULL;
    ex->out_n = 0;
    if (ex->dense) {
        ex->buf = recvbuf;
        ex->src = sendbuf == MPI_IN_PLACE ? NULL : sendbuf;
        if (ex->src) memset(ex->fresh, 1, ex->prog->blocks);
        return MPI_SUCCESS;
    }
    size_t bytes = rl_span(ex, ex->count);
    free(ex->work);
    ex->work = malloc(bytes ? bytes : 1);
    if (!ex->work) return MPI_ERR_NO_MEM;
    ex->buf = ex->work;
    ex->src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    memset(ex->fresh, 1, ex->prog->blocks);
    ex->out = recvbuf;
    ex->out_from = 0;
    ex->out_n = ex->count;
    return MPI_SUCCESS;
}
