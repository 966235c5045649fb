import SLIDING_WINDOW_LUA from "./sliding-window.lua";

/** The sliding-window script, exactly as sent to Redis (see sliding-window.lua). */
export const SLIDING_WINDOW_SCRIPT: string = SLIDING_WINDOW_LUA;

/**
 * SHA1 of {@link SLIDING_WINDOW_SCRIPT}: what EVALSHA names it by. A test recomputes it
 * from the file, so an edit to the script without updating this constant fails CI.
 */
export const SLIDING_WINDOW_SHA1 = "5498e4e8a5e18c9ce0a944e35773cb526db71c50";
