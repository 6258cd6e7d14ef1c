/* The library's one clock: seconds on the monotonic clock, for round deadlines, backoff and the training
 * loop's progress reports (differences only; the origin is arbitrary). */
#ifndef OTTER_CORE_CLOCK_H
#define OTTER_CORE_CLOCK_H

double ot_now_seconds(void);

#endif
