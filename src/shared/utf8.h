/* SPDX-License-Identifier: MIT */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Returns the length (2..4) of the well-formed UTF-8 sequence that starts with the non-ASCII byte
 * at p (p[0] >= 0x80), or 0 if it is invalid: a stray continuation byte, an overlong form, a
 * surrogate, a code point above U+10FFFF or a sequence cut short by end. Ranges from RFC 3629,
 * section 4. The one validator of the daemon's parser and of libdivvy's request builder. */
size_t utf8_sequence_len(const uint8_t *p, const uint8_t *end);

/* Where to cut s[0..pos) so that no UTF-8 sequence is split: pos, or the start of the sequence
 * that s[pos] continues. s[pos] must exist (pos <= strlen(s)). For messages cut to a size. */
size_t utf8_boundary(const char *s, size_t pos);

/* Replaces every control byte but tab (C0 and DEL) in s with '?', in place: for text that must
 * stay one line of a log, of --check-config's output or of an sd_notify STATUS= value, where a
 * line break would start an assignment of the text's choosing. */
void text_mask_controls(char *s);
