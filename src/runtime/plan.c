/* The memory planner: every intermediate of a run (and every kernel's scratch block) gets an
 * offset in one arena.
 *
 * First the lifetimes: walk the nodes in execution order; each output (and each kernel's scratch)
 * opens a block that lives from its node to the node freeing it, the last reader (scratch: its own
 * node), so a node's outputs never overlap its own inputs. Exception, in place: when the kernel is
 * flagged OT_OP_INPLACE0 (or INPLACE3) and that input is an intermediate that dies at this node
 * with a block at least as large as output 0, output 0 continues input's block. Views: the output
 * of a kernel flagged OT_OP_VIEW0 (Reshape and its kin, which copy nothing then) shares input 0's
 * block whether or not input 0 dies there; the block lives until the last of the values on it dies,
 * and no kernel runs in place on it while more than one of them lives. A training graph keeps most
 * forward values for its backward pass, so its Reshapes were copies into blocks of their own (the
 * encoder_d256 training graph's arena 451 -> 429 MB). Then the offsets,
 * greedy by size (as TensorFlow Lite's arena planner): largest block first, each into the tightest
 * gap between the blocks already placed whose lifetimes overlap its own, else above them. Placing
 * in execution order instead (a best-fit free list) left resnet18's training arena 2x its live
 * peak: small short-lived gradients took holes that the next large activation could not use. The
 * arena's size is the highest end of a block (the planned peak). Sizes come from the run that just
 * finished (ot_slot.size, ot_exec_node.scratch_size). */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "runtime/session.h"

typedef struct blk {
    size_t size, first, last; /* bytes; execution steps of its first writer and of its freeing */
    size_t off;
    size_t live; /* values on the block not yet dead (more than one: views) */
} blk;

static size_t align_up(size_t n) { return (n + OT_ARENA_ALIGN - 1) / OT_ARENA_ALIGN * OT_ARENA_ALIGN; }

/* Placement order: larger first, then earlier first, then the order the walk opened them. */
typedef struct blk_rank {
    size_t size, first, id;
} blk_rank;

static int cmp_rank(const void *pa, const void *pb) {
    const blk_rank *x = pa, *y = pb;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_off(const void *pa, const void *pb) {
    const blk *x = *(const blk *const *)pa, *y = *(const blk *const *)pb;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Offsets for blocks b[0..n), greedy by size; returns the arena size. `scratch` holds n pointers. */
static size_t place_blocks(blk *b, size_t n, blk_rank *rank, const blk **scratch) {
    for (size_t i = 0; i < n; i++) rank[i] = (blk_rank){b[i].size, b[i].first, i};
    qsort(rank, n, sizeof *rank, cmp_rank);
    size_t arena = 0;
    for (size_t r = 0; r < n; r++) {
        blk *x = &b[rank[r].id];
        size_t k = 0; /* the placed blocks alive at some step x is alive, by offset */
        for (size_t q = 0; q < r; q++) {
            const blk *y = &b[rank[q].id];
            if (y->first <= x->last && x->first <= y->last) scratch[k++] = y;
        }
        qsort(scratch, k, sizeof *scratch, cmp_off);
        size_t at = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
        for (size_t q = 0; q < k; q++) {
            if (scratch[q]->off > cursor) {
                size_t gap = scratch[q]->off - cursor;
                if (gap >= x->size && gap < best_gap) at = cursor, best_gap = gap;
            }
            if (scratch[q]->off + scratch[q]->size > cursor) cursor = scratch[q]->off + scratch[q]->size;
        }
        x->off = at != SIZE_MAX ? at : cursor;
        if (x->off + x->size > arena) arena = x->off + x->size;
    }
    return arena;
}

bool ot_shape_key_equal(const ot_shape_key *a, const ot_shape_key *b, size_t n) {
    for (size_t j = 0; j < n; j++) {
        if (a[j].given != b[j].given || (b[j].given && a[j].kind != b[j].kind)) return false;
        if (b[j].given && (a[j].dtype != b[j].dtype || a[j].rank != b[j].rank ||
                           memcmp(a[j].dims, b[j].dims, (size_t)b[j].rank * sizeof(int64_t)) != 0))
            return false;
    }
    return true;
}

static void saved_free(ot_saved_plan *p) {
    ot_free(p->key);
    ot_free(p->slot_off);
    ot_free(p->slot_size);
    ot_free(p->scr_off);
    ot_free(p->scr_size);
    memset(p, 0, sizeof *p);
}

void ot_plans_free(otter_session *s) {
    for (size_t i = 0; i < s->n_saved; i++) saved_free(&s->plans[i]);
    s->n_saved = 0;
}

static void set_stats(otter_session *s, const ot_saved_plan *p) {
    s->arena_size = p->arena_size;
    s->stats.arena_bytes = p->arena_size;
    s->stats.naive_bytes = p->naive;
    s->stats.n_planned = p->n_planned;
    s->stats.n_inplace = p->n_inplace;
}

bool ot_plan_activate(otter_session *s, const ot_shape_key *key) {
    for (size_t i = 0; i < s->n_saved; i++) {
        ot_saved_plan *p = &s->plans[i];
        if (!ot_shape_key_equal(p->key, key, s->n_all_inputs)) continue;
        for (size_t k = 0; k < s->n_slots; k++) {
            s->slots[k].planned = p->slot_size[k] > 0;
            s->slots[k].offset = p->slot_off[k];
            s->slots[k].plan_size = p->slot_size[k];
        }
        for (size_t k = 0; k < s->n_nodes; k++) {
            s->nodes[k].scratch_planned = p->scr_size[k] > 0;
            s->nodes[k].scratch_offset = p->scr_off[k];
            s->nodes[k].scratch_plan = p->scr_size[k];
        }
        p->used = ++s->tick;
        set_stats(s, p);
        s->have_plan = true;
        return true;
    }
    return false;
}

/* Keep the layout now in the slots for these shapes (replacing a plan for the same shapes, else
 * the least recently used one when the cache is full). Failure only means it isn't cached. */
static void save_plan(otter_session *s, const ot_shape_key *key, size_t naive, size_t n_planned, size_t n_inplace) {
    size_t at = s->n_saved;
    for (size_t i = 0; i < s->n_saved; i++)
        if (ot_shape_key_equal(s->plans[i].key, key, s->n_all_inputs)) at = i;
    if (at == s->n_saved && s->n_saved == OT_MAX_PLANS) {
        at = 0;
        for (size_t i = 1; i < s->n_saved; i++)
            if (s->plans[i].used < s->plans[at].used) at = i;
    }
    ot_saved_plan p = {0};
    p.key = ot_calloc(s->n_all_inputs + 1, sizeof *p.key);
    p.slot_off = ot_calloc(s->n_slots + 1, sizeof(size_t));
    p.slot_size = ot_calloc(s->n_slots + 1, sizeof(size_t));
    p.scr_off = ot_calloc(s->n_nodes + 1, sizeof(size_t));
    p.scr_size = ot_calloc(s->n_nodes + 1, sizeof(size_t));
    if (!p.key || !p.slot_off || !p.slot_size || !p.scr_off || !p.scr_size) {
        saved_free(&p);
        return;
    }
    memcpy(p.key, key, s->n_all_inputs * sizeof *key);
    for (size_t k = 0; k < s->n_slots; k++) {
        p.slot_off[k] = s->slots[k].offset;
        p.slot_size[k] = s->slots[k].planned ? s->slots[k].plan_size : 0;
    }
    for (size_t k = 0; k < s->n_nodes; k++) {
        p.scr_off[k] = s->nodes[k].scratch_offset;
        p.scr_size[k] = s->nodes[k].scratch_planned ? s->nodes[k].scratch_plan : 0;
    }
    p.arena_size = s->arena_size;
    p.naive = naive;
    p.n_planned = n_planned;
    p.n_inplace = n_inplace;
    p.used = ++s->tick;
    if (at < s->n_saved)
        saved_free(&s->plans[at]);
    else
        s->n_saved++;
    s->plans[at] = p;
}

/* The sum input of a fused node (3) only when no other input is the same value: the kernel reads
 * its other inputs beyond the element it writes. Inputs are taken through Identity aliases, to the
 * memory they share (a gradient graph's Reshape reading an Identity's output copied 12.6 MB). */
size_t ot_inplace_source(const otter_session *s, const ot_exec_node *rn, const ot_slot *out) {
    const size_t src = rn->def->flags & OT_OP_INPLACE0 ? 0 : rn->def->flags & OT_OP_INPLACE3 ? 3 : SIZE_MAX;
    if (src >= rn->node->n_inputs || rn->in_slots[src] == OT_NO_INDEX) return OT_NO_INDEX;
    const size_t si = ot_slot_local_target(s, rn->in_slots[src]);
    for (size_t k = 0; src != 0 && k < rn->node->n_inputs; k++)
        if (k != src && ot_slot_local_target(s, rn->in_slots[k]) == si) return OT_NO_INDEX;
    const ot_slot *in = &s->slots[si];
    if (in->kind != OT_SLOT_VALUE || in->last_use != out->producer || in->is_string || out->is_string)
        return OT_NO_INDEX;
    /* Only an input with as many elements as the output: a broadcast input 0 is read again after
     * the elements it shares memory with were written (Mul of [2,1,1] by [2,1,8]), and its block,
     * rounded up to the arena's alignment, can be large enough for the output all the same. */
    if (otter_tensor_numel(&in->tensor) != otter_tensor_numel(&out->tensor)) return OT_NO_INDEX;
    return si;
}

/* The slot whose buffer output 0 of rn may share as a view (OT_OP_VIEW0), or OT_NO_INDEX: input 0
 * when it is a value of this run (not a graph input or constant, which live outside the arena)
 * with the output's size. Strings never: each value frees its own strings. */
static size_t view_source(const otter_session *s, const ot_exec_node *rn, const ot_slot *out) {
    if (!(rn->def->flags & OT_OP_VIEW0) || rn->node->n_inputs == 0 || rn->in_slots[0] == OT_NO_INDEX)
        return OT_NO_INDEX;
    const size_t si = ot_slot_local_target(s, rn->in_slots[0]);
    const ot_slot *in = &s->slots[si];
    if (in->kind != OT_SLOT_VALUE || !in->planned || in->is_string || out->is_string || in->size != out->size)
        return OT_NO_INDEX;
    return si;
}

/* A large arena asks for 2 MB pages where the kernel gives them on request (transparent huge pages in
 * "madvise" mode, Debian's default): products and passes over training activations read rows a page
 * or more apart (dY^T packed for the weight gradients, attention heads, C written along rows), a TLB
 * miss a row on 4 KB pages. encoder_d256's training step 863-953 -> 760-804 ms (1 thread), resnet18's
 * and mobilenet_v2's 3-16% faster; the same peak RSS (every page of the arena is touched each step). */
static void arena_huge_pages(unsigned char *arena, size_t size) {
    if (size >= (size_t)32 << 20) ot_huge_page_hint(arena, size);
}

otter_status ot_plan_build(otter_session *s, const ot_shape_key *key) {
    s->have_plan = false;
    /* at most one block per slot and one per node's scratch */
    size_t max_blocks = s->n_slots + s->n_nodes + 1;
    blk *b = ot_calloc(max_blocks, sizeof *b);
    blk_rank *rank = ot_calloc(max_blocks, sizeof *rank);
    const blk **scratch = ot_calloc(max_blocks, sizeof *scratch);
    size_t *slot_blk = ot_calloc(s->n_slots + 1, sizeof *slot_blk),
           *scr_blk = ot_calloc(s->n_nodes + 1, sizeof *scr_blk);
    bool *moved = ot_calloc(s->n_slots + 1, sizeof(bool));
    otter_status st = OTTER_OK;
    if (!b || !rank || !scratch || !slot_blk || !scr_blk || !moved) {
        st = OT_NOMEM();
        goto done;
    }
    for (size_t i = 0; i < s->n_slots; i++) s->slots[i].planned = false;
    size_t n_blk = 0, naive = 0, n_planned = 0, n_inplace = 0;
    for (size_t e = 0; e < s->n_order; e++) {
        ot_exec_node *rn = &s->nodes[s->order[e]];
        rn->scratch_planned = false;
        for (size_t i = 0; i < rn->node->n_outputs; i++) {
            size_t oi = rn->out_slots[i];
            ot_slot *o = &s->slots[oi];
            if (o->kind != OT_SLOT_VALUE || o->size == 0) continue;
            size_t need = align_up(o->size);
            naive += need;
            n_planned++;
            o->planned = true;
            const size_t vi = i == 0 ? view_source(s, rn, o) : OT_NO_INDEX;
            if (vi != OT_NO_INDEX) {
                o->plan_size = s->slots[vi].plan_size;
                slot_blk[oi] = slot_blk[vi];
                b[slot_blk[vi]].live++;
                n_inplace++;
                continue;
            }
            size_t ii = i == 0 ? ot_inplace_source(s, rn, o) : OT_NO_INDEX;
            if (ii != OT_NO_INDEX) {
                ot_slot *in = &s->slots[ii];
                /* not while a view of the input lives on: it would see the output's elements */
                if (in->planned && !moved[ii] && in->plan_size >= need && b[slot_blk[ii]].live == 1) {
                    o->plan_size = in->plan_size;
                    slot_blk[oi] = slot_blk[ii];
                    moved[ii] = true;
                    n_inplace++;
                    continue;
                }
            }
            o->plan_size = need;
            slot_blk[oi] = n_blk;
            b[n_blk++] = (blk){.size = need, .first = e, .last = SIZE_MAX, .live = 1};
        }
        if (rn->scratch_size > 0) {
            rn->scratch_plan = align_up(rn->scratch_size);
            rn->scratch_planned = true;
            scr_blk[s->order[e]] = n_blk;
            b[n_blk++] = (blk){.size = rn->scratch_plan, .first = e, .last = e};
            naive += rn->scratch_plan;
            n_planned++;
        }
        for (size_t d = 0; d < rn->n_dying; d++) {
            size_t si = rn->dying[d];
            if (s->slots[si].planned && !moved[si] && --b[slot_blk[si]].live == 0) b[slot_blk[si]].last = e;
        }
    }
    size_t peak = place_blocks(b, n_blk, rank, scratch);
    for (size_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].planned) s->slots[i].offset = b[slot_blk[i]].off;
    for (size_t e = 0; e < s->n_order; e++) {
        ot_exec_node *rn = &s->nodes[s->order[e]];
        if (rn->scratch_planned) rn->scratch_offset = b[scr_blk[s->order[e]]].off;
    }
    if (peak > s->arena_cap) {
        st = ot_session_reserve(s, peak - s->arena_cap, "the memory plan");
        /* the old arena stays valid (cached plans use it) unless the new one is had */
        unsigned char *mem = st == OTTER_OK ? ot_malloc(peak + OT_ARENA_ALIGN) : NULL;
        if (st == OTTER_OK && !mem) st = OT_NOMEM();
        if (st != OTTER_OK) goto done;
        ot_free(s->arena_mem);
        s->arena_mem = mem;
        s->arena = (unsigned char *)(((uintptr_t)s->arena_mem + OT_ARENA_ALIGN - 1) / OT_ARENA_ALIGN * OT_ARENA_ALIGN);
        s->arena_cap = peak;
        arena_huge_pages(s->arena, peak);
    }
    s->arena_size = peak;
    s->stats.arena_bytes = peak;
    s->stats.naive_bytes = naive;
    s->stats.n_planned = n_planned;
    s->stats.n_inplace = n_inplace;
    s->stats.n_plans++;
    save_plan(s, key, naive, n_planned, n_inplace);
    s->have_plan = true;
done:
    ot_free(b);
    ot_free(rank);
    ot_free(scratch);
    ot_free(slot_blk);
    ot_free(scr_blk);
    ot_free(moved);
    return st;
}

void ot_plan_release_pages(otter_session *s) {
#ifdef MADV_DONTNEED
    long page = sysconf(_SC_PAGESIZE);
    if (!s->arena || page <= 0) return;
    /* the pages read back as zeros when touched again; no value lives in the arena between runs */
    ot_advise_whole_pages(s->arena, s->arena_cap, (size_t)page, MADV_DONTNEED);
#else
    (void)s;
#endif
}
