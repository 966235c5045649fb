declare namespace Cloudflare {
  interface Env {
    /** JSON of the Services the global setup started (test/setup/services.ts) */
    TEST_SERVICES: string;
  }
}
