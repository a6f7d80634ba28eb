/*
 * kvwin.c — the window pool (kvcache.h, tkv__kvwin): the sliding-window
 * layers' rows for the cells that need them, which rows stay, what is
 * reusable, and the pool's check.
 */
#include "kvcache_impl.h"

#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

enum { NO_CELL = UINT32_MAX };

static bool pooled(const tkv__kvcache *kv, uint32_t cell) {
    const int32_t r = kv->rows.win_row[cell];
    return r >= 0 && (uint32_t)r < kv->rows.n_rows;
}

tkv_status tkv__kv_win_create(tkv__kvcache *kv, const tkv__kvwin_params *wp) {
    tkv__kvrows *r = &kv->rows;
    const uint32_t n_cells = r->n_cells;
    kv->win = tkv__calloc(1, sizeof *kv->win);
    r->lmap = tkv__malloc(r->n_layer * sizeof *r->lmap);
    r->win_row = tkv__malloc(n_cells * sizeof *r->win_row);
    if (!kv->win || !r->lmap || !r->win_row) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the window pool");
    tkv__kvwin *w = kv->win;
    w->window = wp->window;
    r->n_rows = wp->n_rows;
    r->n_win = r->n_full = 0;
    for (uint32_t l = 0; l < r->n_layer; l++) r->lmap[l] = wp->layer_win[l] ? (int32_t)r->n_win++ : -1 - (int32_t)r->n_full++;
    for (uint32_t c = 0; c < n_cells; c++) r->win_row[c] = -1;
    /* (n_win, n_rows + 1, n_embd_kv): zeroed, so the last row of each layer reads as zeros */
    r->wk = tkv__calloc((size_t)r->n_win * (r->n_rows + 1), r->row_size_k);
    r->wv = tkv__calloc((size_t)r->n_win * (r->n_rows + 1), r->row_size_v);
    w->row_cell = tkv__malloc((size_t)r->n_rows * sizeof *w->row_cell);
    w->row_free = tkv__malloc((size_t)r->n_rows * sizeof *w->row_free);
    w->need = tkv__calloc(n_cells, sizeof *w->need);
    w->src = tkv__malloc(n_cells * sizeof *w->src);
    w->short_seq = tkv__calloc(kv->n_seq, 1);
    if (!r->wk || !r->wv || !w->row_cell || !w->row_free || !w->need || !w->src || !w->short_seq)
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for a window pool of %u rows", r->n_rows);
    for (uint32_t i = 0; i < r->n_rows; i++) w->row_cell[i] = NO_CELL, w->row_free[i] = r->n_rows - 1 - i;
    w->n_row_free = r->n_rows;
    return TKV_OK;
}

void tkv__kv_win_free(tkv__kvcache *kv) {
    tkv__kvrows *r = &kv->rows;
    tkv__free(r->lmap);
    tkv__free(r->win_row);
    tkv__free(r->wk);
    tkv__free(r->wv);
    tkv__free(r->sk);
    tkv__free(r->sv);
    if (kv->win) {
        tkv__free(kv->win->row_cell);
        tkv__free(kv->win->row_free);
        tkv__free(kv->win->need);
        tkv__free(kv->win->src);
        tkv__free(kv->win->short_seq);
    }
    tkv__free(kv->win);
}

uint64_t tkv__kv_win_bytes(const tkv__kvcache *kv) {
    const tkv__kvrows *r = &kv->rows;
    return (uint64_t)r->n_win * (r->n_rows + 1) * (r->row_size_k + r->row_size_v);
}

/* ---- the stage and the commit --------------------------------------------- */

tkv_status tkv__kv_win_reserve(tkv__kvcache *kv, uint32_t n) {
    tkv__kvrows *r = &kv->rows;
    if (!kv->win || n <= r->cap_stage) return TKV_OK;
    uint8_t *sk = tkv__malloc((size_t)r->n_win * n * r->row_size_k), *sv = tkv__malloc((size_t)r->n_win * n * r->row_size_v);
    if (!sk || !sv) {
        tkv__free(sk);
        tkv__free(sv);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory staging the window rows of %u tokens", n);
    }
    tkv__free(r->sk);
    tkv__free(r->sv);
    r->sk = sk, r->sv = sv, r->cap_stage = n;
    return TKV_OK;
}

void tkv__kv_win_stage(tkv__kvcache *kv, uint32_t n) {
    if (!kv->win) return;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t c = kv->cells[i];
        kv->win->src[i] = c;
        if (c < kv->rows.n_cells) kv->rows.win_row[c] = (int32_t)(kv->rows.n_rows + 1 + i); /* staging row i */
    }
}

void tkv__kv_win_drop_cell(tkv__kvcache *kv, uint32_t cell) {
    const int32_t r = kv->rows.win_row[cell];
    if (r >= 0 && (uint32_t)r < kv->rows.n_rows) {
        kv->win->row_cell[r] = NO_CELL;
        kv->win->row_free[kv->win->n_row_free++] = (uint32_t)r;
    }
    kv->rows.win_row[cell] = -1;
}

/* Mark the cells of every live sequence's last W positions needed (a new epoch). */
static void mark_needed(tkv__kvcache *kv) {
    tkv__kvwin *w = kv->win;
    if (++w->epoch == 0) { /* wrapped: no stale mark may equal the new epoch */
        memset(w->need, 0, kv->rows.n_cells * sizeof *w->need);
        w->epoch = 1;
    }
    for (uint32_t s = 0; s < kv->n_seq; s++) {
        const tkv__kvseq *q = &kv->seq[s];
        for (uint32_t p = q->n > w->window ? q->n - w->window : 0; p < q->n; p++) w->need[q->cells[p]] = w->epoch;
    }
}

/* A pool row: a free one, else the clock's next row whose cell is not needed (released), else none
   (UINT32_MAX: every row is needed). */
static uint32_t take_row(tkv__kvcache *kv) {
    tkv__kvwin *w = kv->win;
    if (w->n_row_free) return w->row_free[--w->n_row_free];
    const uint32_t n_rows = kv->rows.n_rows;
    for (uint32_t k = 0; k < n_rows; k++) {
        const uint32_t r = w->hand;
        w->hand = w->hand + 1 < n_rows ? w->hand + 1 : 0;
        const uint32_t c = w->row_cell[r];
        if (c != NO_CELL && w->need[c] != w->epoch) {
            kv->rows.win_row[c] = -1;
            w->row_cell[r] = NO_CELL;
            return r;
        }
    }
    return UINT32_MAX;
}

/* Copy batch token i's window rows (staging row i, or its virtual cell's rows) into pool row `row`. */
static void land_rows(tkv__kvcache *kv, uint32_t i, uint32_t row) {
    const tkv__kvrows *r = &kv->rows;
    const uint32_t src = kv->win->src[i];
    for (uint32_t l = 0; l < r->n_layer; l++) {
        const int32_t wl = r->lmap[l];
        if (wl < 0) continue;
        const size_t at = (size_t)wl * (r->n_rows + 1) + row;
        const uint8_t *sk, *sv;
        if (src < r->n_cells) {
            sk = r->sk + ((size_t)wl * r->cap_stage + i) * r->row_size_k;
            sv = r->sv + ((size_t)wl * r->cap_stage + i) * r->row_size_v;
        } else {
            sk = tkv__kvrows_k(r, l, src);
            sv = tkv__kvrows_v(r, l, src);
        }
        memcpy(r->wk + at * r->row_size_k, sk, r->row_size_k);
        memcpy(r->wv + at * r->row_size_v, sv, r->row_size_v);
    }
}

/*
 * The batch of n tokens is published, kv->cells[i] the cell token i ended in (its own, or the one the index
 * kept). Each token's cell that lacks a row gets token i's (a cached token decoded again brings back its
 * cell's released rows), in batch order, from the free rows or else from the oldest-landed row no live
 * sequence needs (the clock): the rows of recent positions stay, older ones go first. A needed cell (among
 * a live sequence's last W positions) always gets one: a needed cell outside the batch has its row already
 * (its sequence's earlier commit, or the floor it was attached at), so while one lacks a row fewer than
 * n_seq W rows are needed, and the pool (at least n_seq W rows) has an unneeded one. Only the last tokens
 * of a batch longer than the pool's spare rows keep theirs.
 */
void tkv__kv_win_commit(tkv__kvcache *kv, uint32_t n) {
    if (!kv->win) return;
    tkv__kvwin *w = kv->win;
    mark_needed(kv);
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t c = kv->cells[i];
        if (pooled(kv, c)) continue; /* a kept cell that has its rows, or one an earlier token landed */
        kv->rows.win_row[c] = -1; /* a staging row of its own, if any, is done with */
        const uint32_t row = take_row(kv);
        if (row == UINT32_MAX) continue;
        land_rows(kv, i, row);
        kv->rows.win_row[c] = (int32_t)row;
        w->row_cell[row] = c;
    }
    for (uint32_t i = 0; i < n; i++) { /* scratch cells the index did not keep were freed (and reset) already */
        const uint32_t s = w->src[i];
        if (s < kv->rows.n_cells && !pooled(kv, s)) kv->rows.win_row[s] = -1;
    }
    for (uint32_t s = 0; s < kv->n_seq; s++) tkv__kv_win_mark_short(kv, (tkv_seq)s);
}

/* ---- what is reusable ----------------------------------------------------- */

uint32_t tkv__kv_win_floor(const tkv__kvcache *kv, const uint32_t *cells, uint32_t n) {
    if (!kv->win) return n;
    const uint32_t back = kv->win->window - 1; /* the positions before L that a token at L attends to */
    uint32_t L = n;
    for (;;) {
        const uint32_t lo = L > back ? L - back : 0;
        uint32_t j = L;
        while (j > lo && pooled(kv, cells[j - 1])) j--;
        if (j == lo) return L;
        L = j - 1; /* position j - 1 has no rows: no prefix that attends to it is reusable */
    }
}

uint32_t tkv__kv_reuse_floor(const tkv__kvcache *kv, const uint32_t *cells, uint32_t n) {
    const uint32_t s = tkv__kv_state_floor(kv, cells, n);
    return tkv__kv_win_floor(kv, cells, s);
}

void tkv__kv_win_mark_short(tkv__kvcache *kv, tkv_seq seq) {
    if (!kv->win) return;
    const tkv__kvseq *q = &kv->seq[seq];
    kv->win->short_seq[seq] = q->n && tkv__kv_win_floor(kv, q->cells, q->n) != q->n;
}

bool tkv__kv_seq_ready(const tkv__kvcache *kv, tkv_seq seq) {
    const tkv__kvseq *s = &kv->seq[seq];
    if (!s->n) return true;
    if (kv->st && !tkv__kv_state_of(kv, s->cells[s->n - 1])) return false;
    return !(kv->win && kv->win->short_seq[seq]);
}

/* ---- the check ------------------------------------------------------------ */

tkv_status tkv__kv_win_check(const tkv__kvcache *kv) {
    if (!kv->win) return TKV_OK;
    const tkv__kvwin *w = kv->win;
    const tkv__kvrows *r = &kv->rows;
    uint32_t held = 0;
    for (uint32_t row = 0; row < r->n_rows; row++) {
        const uint32_t c = w->row_cell[row];
        if (c == NO_CELL) continue;
        held++;
        if (c >= r->n_cells || r->win_row[c] != (int32_t)row)
            return tkv__fail(TKV_ERR_FORMAT, "cache check: window row %u says cell %u, which does not point back at it",
                             row, c);
        if (kv->token[c] == TKV_TOKEN_NULL)
            return tkv__fail(TKV_ERR_FORMAT, "cache check: window row %u is held by free cell %u", row, c);
    }
    if (held + w->n_row_free != r->n_rows)
        return tkv__fail(TKV_ERR_FORMAT, "cache check: window pool: %u rows held and %u free of %u", held,
                         w->n_row_free, r->n_rows);
    for (uint32_t k = 0; k < w->n_row_free; k++)
        if (w->row_free[k] >= r->n_rows || w->row_cell[w->row_free[k]] != NO_CELL)
            return tkv__fail(TKV_ERR_FORMAT, "cache check: window row %u is on the free list and held", w->row_free[k]);
    uint32_t pointing = 0;
    for (uint32_t c = 0; c < r->n_cells; c++) {
        const int32_t row = r->win_row[c];
        if (row == -1) continue;
        if (row < 0 || (uint32_t)row >= r->n_rows)
            return tkv__fail(TKV_ERR_FORMAT, "cache check: cell %u has window row %d outside the pool", c, (int)row);
        pointing++;
    }
    if (pointing != held)
        return tkv__fail(TKV_ERR_FORMAT, "cache check: %u cells have window rows, %u rows are held", pointing, held);
    for (uint32_t s = 0; s < kv->n_seq; s++) {
        const tkv__kvseq *q = &kv->seq[s];
        const uint32_t back = w->window - 1, from = q->n > back ? q->n - back : 0;
        for (uint32_t p = from; p < q->n && !w->short_seq[s]; p++)
            if (!pooled(kv, q->cells[p]))
                return tkv__fail(TKV_ERR_FORMAT,
                                 "cache check: sequence %u position %u (of %u) has no window rows, and the sequence "
                                 "is not marked for a replay", s, p, q->n);
    }
    for (uint32_t l = 0; l < r->n_win; l++) { /* the zero row, read where a released row is masked */
        const uint8_t *zk = r->wk + ((size_t)l * (r->n_rows + 1) + r->n_rows) * r->row_size_k;
        const uint8_t *zv = r->wv + ((size_t)l * (r->n_rows + 1) + r->n_rows) * r->row_size_v;
        for (size_t b = 0; b < r->row_size_k; b++)
            if (zk[b]) return tkv__fail(TKV_ERR_FORMAT, "cache check: window layer %u's zero K row was written", l);
        for (size_t b = 0; b < r->row_size_v; b++)
            if (zv[b]) return tkv__fail(TKV_ERR_FORMAT, "cache check: window layer %u's zero V row was written", l);
    }
    return TKV_OK;
}
