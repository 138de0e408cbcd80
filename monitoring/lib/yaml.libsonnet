// A YAML writer for rule files and PrometheusRules: block scalars for
// multi-line strings (PromQL stays readable), single quotes otherwise, fields
// in the order Prometheus documents them. jsonnet 0.18's std.manifestYamlDoc
// escapes every character in jsonnet code and takes tens of seconds here.
local order = [
  'apiVersion',
  'kind',
  'metadata',
  'spec',
  'name',
  'groups',
  'rules',
  'alert',
  'record',
  'expr',
  'for',
  'labels',
  'annotations',
  'summary',
  'description',
  'runbook_url',
];
local rank(k) =
  local i = std.find(k, order);
  if std.length(i) > 0 then i[0] else std.length(order);

local fields(o) = std.sort(std.objectFields(o), function(k) std.char(65 + rank(k)) + k);

local scalar(v, indent) =
  if std.type(v) == 'string' then
    local n = std.length(v);
    if std.strReplace(v, '\n', '') != v then
      local trailing = n > 0 && v[n - 1] == '\n';
      local body = if trailing then std.substr(v, 0, n - 1) else v;
      (if trailing then '|' else '|-') + '\n' + indent + std.strReplace(body, '\n', '\n' + indent)
    else "'" + std.strReplace(v, "'", "''") + "'"
  else if v == null then 'null'
  else std.toString(v);

local value(v, indent) =
  if std.type(v) == 'object' then
    if std.length(v) == 0 then ' {}' else '\n' + object(v, indent)
  else if std.type(v) == 'array' then
    if std.length(v) == 0 then ' []' else '\n' + array(v, indent)
  else ' ' + scalar(v, indent + '  '),

      // Fields of `o`, each line starting with `indent` (the first with `first`).
      object(o, indent, first=indent) =
  local fs = fields(o);
  std.join('\n', [
    (if i == 0 then first else indent) + fs[i] + ':' + value(o[fs[i]], indent + '  ')
    for i in std.range(0, std.length(fs) - 1)
  ]),

      array(a, indent) =
  std.join('\n', [
    if std.type(e) == 'object' then
      object(e, indent + '  ', indent + '- ')
    else indent + '-' + value(e, indent + '  ')
    for e in a
  ]);

{
  manifest(o):: object(o, '') + '\n',
}
