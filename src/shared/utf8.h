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

/* Compares a[0..a_len) with b[0..b_len) as JavaScript's default sort() compares strings: by
 * their UTF-16 code units. For well-formed UTF-8 this is code point (byte) order, except that
 * the code points from U+10000 up (surrogate pairs, U+D800..U+DFFF in UTF-16) sort before
 * U+E000..U+FFFF. Bytes that are not well-formed UTF-8 compare by their value. Returns < 0,
 * 0 or > 0, as memcmp(); a proper prefix sorts first. Node divvy 1.7 sorts a rule's operation
 * keys so (Object.keys().sort()) to name its counters. */
int utf8_cmp_utf16(const char *a, size_t a_len, const char *b, size_t b_len);
