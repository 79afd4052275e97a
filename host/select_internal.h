/* Shared between host/select.c and the tests; not installed. */
#ifndef CLKV_HOST_SELECT_INTERNAL_H
#define CLKV_HOST_SELECT_INTERNAL_H

/* Force the kernel path of clkv_select_topk (tests: both paths on every shape):
 * 0 = the library's choice, 1 = one work-group per row (select_row), 2 = the chunked
 * multi-kernel pipeline. Process wide, not thread-safe; $CLKV_SELECT_ROW (read once per
 * process) sets 1 ("1") or 2 ("0") too. */
void clkv__select_force_path(int path);

#endif
