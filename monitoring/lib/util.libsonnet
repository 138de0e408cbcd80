// Small helpers shared by the alerts and the dashboards.
{
  // '90s', '10m', '2h', '1d' → seconds.
  seconds(d)::
    local n = std.parseInt(std.substr(d, 0, std.length(d) - 1));
    local unit = d[std.length(d) - 1];
    n * { s: 1, m: 60, h: 3600, d: 86400 }[unit],

  // Seconds → '30 seconds', '5 minutes', 'an hour', '2 hours'.
  humanize(s)::
    if s % 3600 == 0 then (if s == 3600 then 'an hour' else '%d hours' % (s / 3600))
    else if s % 60 == 0 then (if s == 60 then 'a minute' else '%d minutes' % (s / 60))
    else '%d seconds' % s,

  // `namespace/job` style text naming the alert's group, for descriptions.
  where(labels)::
    std.join('/', ['{{ $labels.%s }}' % l for l in labels]),

  // An `le` label value as exporters write it (`300`) and as Prometheus 3
  // normalises it (`300.0`).
  leRegex(v):: '%d(\\\\.0)?' % v,

  round6(x):: std.floor(x * 1e6 + 0.5) / 1e6,

  // 0.01 → '1%'.
  percent(x):: std.toString(std.floor(x * 1e6 + 0.5) / 1e4) + '%',
}
