import * as vega from "vega";
import * as vegaLite from "vega-lite";

interface Bar {
  panel: string;
  series: string;
  label: string;
  value: number;
}

/**
 * The benchmark's figures as one SVG, drawn by Vega-Lite: script throughput against SET,
 * bytes per in-window request, and latency added by each gate.
 */
export async function renderChart(bars: Bar[]): Promise<string> {
  // grouped: one bar per series for each label; otherwise each label is one series' bar
  const panel = (name: string, title: string, axis: string, grouped = true) => ({
    title,
    transform: [{ filter: `datum.panel === '${name}'` }],
    width: 360,
    mark: { type: "bar", tooltip: true },
    encoding: {
      y: { field: "label", type: "nominal", sort: null, title: null, axis: { labelLimit: 260 } },
      x: { field: "value", type: "quantitative", title: axis },
      color: { field: "series", type: "nominal", title: null },
      ...(grouped && { yOffset: { field: "series" } }),
    },
  });
  const spec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    data: { values: bars },
    vconcat: [
      panel("usec", "Redis time per decision (µs per call, lower is better)", "µs", false),
      panel("memory", "Memory per in-window request (bytes, lower is better)", "bytes"),
      panel("latency", "Latency added over the origin (ms, lower is better)", "ms"),
    ],
    config: { font: "sans-serif" },
  };
  const compiled = vegaLite.compile(spec as vegaLite.TopLevelSpec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: "none" });
  const svg = await view.toSVG();
  view.finalize();
  return svg;
}
