/**
 * Summaries an isolate still holds when its requests stop. The logs write what they counted
 * after a later response, once their interval has passed (`due()`); after the last request of
 * a burst no response comes, and an isolate the runtime then evicts takes its counts with it.
 * So a response that leaves counts unwritten arms a wait in its background (`ctx.waitUntil`):
 * when no later response has armed a newer one by its end, the isolate has gone quiet and the
 * counts are written then, before their interval is over.
 *
 * A wait ends within `waitMs` of its response, inside the runtime's limit on a response's
 * background work (30 s). While requests keep coming, a response arms a newer wait once the
 * armed one is `rearmMs` old, so at most one wait in `rearmMs` is armed, and an armed wait is
 * superseded before it ends: a flood still writes its summaries once an interval, not once a
 * wait.
 *
 * @example
 * const quiet = createQuietFlush({ flush: () => denials.flush() });
 * // after each response that leaves counts unwritten:
 * quiet.schedule(ctx);
 */

export interface QuietFlushOptions {
  /** writes whatever is counted */
  flush: () => unknown;
  /** the clock, ms (default Date.now) */
  now?: () => number;
  /** how long a response's background waits for a later response (default 20 s) */
  waitMs?: number;
  /** how old the armed wait is when a response arms a newer one (default 5 s) */
  rearmMs?: number;
}

export interface QuietFlush {
  /** arms a wait in this response's background, unless one armed less than `rearmMs` ago will outlast it */
  schedule(background: { waitUntil(promise: Promise<unknown>): void }): void;
}

export const QUIET_FLUSH_DEFAULTS = { waitMs: 20_000, rearmMs: 5000 } as const;

export function createQuietFlush(options: QuietFlushOptions): QuietFlush {
  const { flush } = options;
  const now = options.now ?? Date.now;
  const waitMs = options.waitMs ?? QUIET_FLUSH_DEFAULTS.waitMs;
  const rearmMs = options.rearmMs ?? QUIET_FLUSH_DEFAULTS.rearmMs;
  /** the newest wait, and when it was armed */
  let armed: { at: number } | undefined;
  return {
    schedule(background) {
      const at = now();
      if (armed && at - armed.at < rearmMs) return;
      const wait = { at };
      armed = wait;
      background.waitUntil(
        new Promise((resolve) => setTimeout(resolve, waitMs)).then(() => {
          // a newer wait holds a later response's counts too: it writes them
          if (armed !== wait) return;
          armed = undefined;
          return flush();
        }),
      );
    },
  };
}
