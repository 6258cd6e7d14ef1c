/* Shape rules for operators that had a kernel but no rule (issue 13): quantized convolution and
 * matmul, GridSample, MaxUnpool, RoiAlign, NonMaxSuppression, Unique, the signal operators, text
 * operators, Multinomial (infer_extra.c), and sequences and optionals (infer_sequence.c).
 *
 * Each rule is declared here so the operator registry can name it; the tables below wire them
 * into the driver (infer.c) until then. */
#ifndef OTTER_INFER_GAPS_H
#define OTTER_INFER_GAPS_H

#include "infer/infer_internal.h"

/* Default-domain rule tables, {NULL, NULL}-terminated. */
extern const ot_infer_rule ot_infer_rules_extra[];
extern const ot_infer_rule ot_infer_rules_sequence[];

/* ---- infer_extra.c ---- */
otter_status ot_infer_conv_integer(ot_inode *n);
otter_status ot_infer_qlinear_conv(ot_inode *n);
otter_status ot_infer_qlinear_matmul(ot_inode *n);
otter_status ot_infer_gridsample(ot_inode *n);
otter_status ot_infer_maxunpool(ot_inode *n);
otter_status ot_infer_roialign(ot_inode *n);
otter_status ot_infer_nonmaxsuppression(ot_inode *n);
otter_status ot_infer_unique(ot_inode *n);
otter_status ot_infer_dft(ot_inode *n);
otter_status ot_infer_stft(ot_inode *n);
otter_status ot_infer_window(ot_inode *n); /* HannWindow, HammingWindow, BlackmanWindow */
otter_status ot_infer_melweightmatrix(ot_inode *n);
otter_status ot_infer_stringnormalizer(ot_inode *n);
otter_status ot_infer_tfidfvectorizer(ot_inode *n);
otter_status ot_infer_multinomial(ot_inode *n);

/* ---- infer_sequence.c ---- */
otter_status ot_infer_sequence_empty(ot_inode *n);
otter_status ot_infer_sequence_construct(ot_inode *n);
otter_status ot_infer_sequence_insert(ot_inode *n);
otter_status ot_infer_sequence_at(ot_inode *n);
otter_status ot_infer_sequence_erase(ot_inode *n);
otter_status ot_infer_sequence_length(ot_inode *n);
otter_status ot_infer_split_to_sequence(ot_inode *n);
otter_status ot_infer_concat_from_sequence(ot_inode *n);
otter_status ot_infer_sequence_map(ot_inode *n);
otter_status ot_infer_optional(ot_inode *n);
otter_status ot_infer_optional_has_element(ot_inode *n);
otter_status ot_infer_optional_get_element(ot_inode *n);

#endif
