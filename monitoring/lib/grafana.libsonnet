// A minimal Grafana (10.4, schemaVersion 39) panel vocabulary: just what the
// seatflow-reconciler dashboards use. Every panel and query uses the
// `${datasource}` variable.
local ds = { type: 'prometheus', uid: '${datasource}' };

{
  datasource:: ds,

  target(expr, legend, refId='A', instant=false):: {
    refId: refId,
    datasource: ds,
    expr: expr,
    legendFormat: legend,
    range: !instant,
    instant: instant,
    editorMode: 'code',
  },

  thresholds(steps):: {
    mode: 'absolute',
    steps: [{ color: s[0], value: s[1] } for s in steps],
  },

  // Value mappings: 0 → DOWN (red), 1 → UP (green), and the like.
  valueMap(m):: [{
    type: 'value',
    options: {
      [k]: { text: m[k][0], color: m[k][1], index: i }
      for i in std.range(0, std.length(std.objectFields(m)) - 1)
      for k in [std.objectFields(m)[i]]
    },
  }],
  // Values from `from` on (e.g. "never": a timestamp of 0).
  rangeMap(from, text, color):: {
    type: 'range',
    options: { from: from, to: null, result: { text: text, color: color, index: 0 } },
  },

  row(title):: {
    type: 'row',
    title: title,
    collapsed: false,
    panels: [],
  },

  stat(title, description, targets, unit='short', steps=[['green', null]], mappings=[], decimals=null, graph=true):: {
    type: 'stat',
    title: title,
    description: description,
    datasource: ds,
    fieldConfig: {
      defaults: {
        unit: unit,
        thresholds: $.thresholds(steps),
        color: { mode: 'thresholds' },
        mappings: mappings,
      } + (if decimals != null then { decimals: decimals } else {}),
      overrides: [],
    },
    options: {
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      colorMode: 'value',
      graphMode: if graph then 'area' else 'none',
      justifyMode: 'auto',
      orientation: 'auto',
      textMode: 'auto',
      wideLayout: true,
      showPercentChange: false,
    },
    targets: targets,
  },

  timeseries(title, description, targets, unit='short', steps=[['green', null]], thresholdLines=false, mappings=[], decimals=null, min=null):: {
    type: 'timeseries',
    title: title,
    description: description,
    datasource: ds,
    fieldConfig: {
      defaults: {
                  unit: unit,
                  custom: {
                    drawStyle: 'line',
                    lineInterpolation: 'linear',
                    lineWidth: 1,
                    fillOpacity: 10,
                    gradientMode: 'none',
                    showPoints: 'never',
                    pointSize: 4,
                    spanNulls: false,
                    axisPlacement: 'auto',
                    axisLabel: '',
                    axisSoftMin: 0,
                    stacking: { mode: 'none', group: 'A' },
                    thresholdsStyle: { mode: if thresholdLines then 'line' else 'off' },
                    hideFrom: { legend: false, tooltip: false, viz: false },
                  },
                  color: { mode: 'palette-classic' },
                  thresholds: $.thresholds(steps),
                  mappings: mappings,
                } + (if decimals != null then { decimals: decimals } else {})
                + (if min != null then { min: min } else {}),
      overrides: [],
    },
    options: {
      legend: { displayMode: 'table', placement: 'right', showLegend: true, calcs: ['lastNotNull', 'max'] },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
    targets: targets,
  },

  queryVariable(name, label, query):: {
    name: name,
    label: label,
    type: 'query',
    datasource: ds,
    query: query,
    definition: query,
    refresh: 2,
    sort: 1,
    includeAll: true,
    allValue: '.*',
    multi: true,
    current: { selected: true, text: ['All'], value: ['$__all'] },
    options: [],
    regex: '',
    hide: 0,
    skipUrlSync: false,
  },

  // Lays out rows of panels: each element of `rows` is [row panel, [[panel,
  // width, height], ...]]; panels flow left to right, wrapping at 24 columns.
  // Ids are assigned in order.
  layout(rows)::
    local place(acc, item) =
      local kind = item[0];
      if kind == 'row' then
        local y = acc.y + acc.h;
        acc { y: y + 1, x: 0, h: 0, panels+: [item[1] { gridPos: { h: 1, w: 24, x: 0, y: y } }] }
      else
        local w = item[2], h = item[3];
        local wrap = acc.x + w > 24;
        local x = if wrap then 0 else acc.x;
        local y = if wrap then acc.y + acc.h else acc.y;
        acc {
          x: x + w,
          y: y,
          h: if wrap then h else std.max(acc.h, h),
          panels+: [item[1] { gridPos: { h: h, w: w, x: x, y: y } }],
        };
    local flat = std.flattenArrays([
      [['row', r[0]]] + [['panel', p[0], p[1], p[2]] for p in r[1]]
      for r in rows
    ]);
    local placed = std.foldl(place, flat, { x: 0, y: 0, h: 0, panels: [] }).panels;
    [placed[i] { id: i + 1 } for i in std.range(0, std.length(placed) - 1)],
}
