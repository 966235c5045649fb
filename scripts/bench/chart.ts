import * as vega from "vega";
import * as vegaLite from "vega-lite";

interface Bar {
  panel: string;
  series: string;
  label: string;
  value: number;
  /** the lowest and highest of the rounds, drawn as a line through the bar */
  lo?: number;
  hi?: number;
}

/**
 * The benchmark's figures as one SVG, drawn by Vega-Lite: script throughput against SET,
 * bytes per in-window request, and the gateway's latency and throughput against its baseline
 * and floors (medians of rounds, with the spread over rounds where there is one).
 */
export async function renderChart(bars: Bar[]): Promise<string> {
  // grouped: one bar per series for each label; otherwise each label is one series' bar
  const panel = (name: string, title: string, axis: string, grouped = true) => ({
    title,
    transform: [{ filter: `datum.panel === '${name}'` }],
    width: 360,
    encoding: {
      y: { field: "label", type: "nominal", sort: null, title: null, axis: { labelLimit: 260 } },
      ...(grouped && { yOffset: { field: "series", sort: null } }),
    },
    layer: [
      {
        mark: { type: "bar", tooltip: true },
        encoding: {
          x: { field: "value", type: "quantitative", title: axis },
          color: { field: "series", type: "nominal", title: null, sort: null },
        },
      },
      // bars without a spread have no lo/hi, and Vega-Lite leaves such rules out
      { mark: { type: "rule", color: "black" }, encoding: { x: { field: "lo", type: "quantitative" }, x2: { field: "hi" } } },
    ],
  });
  const spec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    data: { values: bars },
    vconcat: [
      panel("usec", "Redis time per decision (µs per call, lower is better)", "µs", false),
      panel("memory", "Memory per in-window request (bytes, lower is better)", "bytes"),
      panel("admitted", "Admitted: latency added over a pass-through Worker (ms, lower is better)", "ms"),
      panel("denied-latency", "Denied: latency (ms, lower is better)", "ms"),
      panel("denied-rps", "Denied: requests per second (higher is better)", "req/s"),
    ],
    config: { font: "sans-serif" },
  };
  const compiled = vegaLite.compile(spec as vegaLite.TopLevelSpec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: "none" });
  const svg = await view.toSVG();
  view.finalize();
  return svg;
}
