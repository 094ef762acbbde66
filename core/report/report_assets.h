// The report's inline style and script (docs/report.md, "Charts"). Plain ES5 so any browser
// opens the file; no library, so nothing to fetch and the file stays small. Neither may hold
// the sequence "</" + "script": the HTML parser would end the script there.
#pragma once

namespace fulcrum::report {

inline constexpr const char* kReportCss = R"css(
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;color:#222}
h1{font-size:22px}h2{font-size:19px;border-bottom:2px solid #4e79a7;padding-bottom:2px;margin-top:36px}
h3{font-size:16px;margin:22px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
table[data-table=plan_top] td{white-space:nowrap}table[data-table=plan_infeasible] td:last-child{text-align:left}
table.kv th{text-align:left;background:#f6f6f6}table.kv td{text-align:left}
table.sortable th{cursor:pointer;background:#f0f3f8;user-select:none}
th[data-sort=asc]::after{content:" \25B2"}th[data-sort=desc]::after{content:" \25BC"}
.caption{color:#555;margin:4px 0}.empty{color:#888;font-style:italic}
.chartbox{display:table;position:relative;overflow:hidden;margin:4px 0}
svg.chart{display:block;max-width:100%;height:auto;cursor:grab;font-size:11px}
svg.chart text{fill:#333;pointer-events:none}svg.chart text.onmark{fill:#fff}
svg.chart .grid{stroke:#e4e4e4}svg.chart .mark:hover{stroke:#000;stroke-width:1}
button.reset{position:absolute;right:0;top:0;font-size:11px}
#tip{position:absolute;background:#222;color:#fff;padding:3px 7px;border-radius:3px;font-size:12px;pointer-events:none;max-width:480px;white-space:pre-wrap}
#report-errors{background:#fee;color:#900;padding:8px}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:6px}
nav ul{padding-left:18px}
)css";

// In <head>, before anything else runs: every uncaught error and every blocked request (the
// Content-Security-Policy's report) is written into the page, where tests and users see it.
inline constexpr const char* kReportErrorScript = R"js(
window.reportErrors=[];
function reportError(message){
  window.reportErrors.push(String(message));
  var box=document.getElementById('report-errors');
  if(box){box.textContent=window.reportErrors.join('\n');box.hidden=false;}
  document.documentElement.setAttribute('data-errors',String(window.reportErrors.length));
}
window.addEventListener('error',function(e){reportError('error: '+(e.message||e));});
document.addEventListener('securitypolicyviolation',function(e){reportError('blocked: '+e.violatedDirective+' '+e.blockedURI);});
)js";

// At the end of <body>: tooltips from data-tip (as text, never HTML), zoom and pan on each
// chart's viewBox, sortable tables; then data-ready="1" on <body>.
inline constexpr const char* kReportScript = R"js(
(function(){
'use strict';
var each=function(list,f){Array.prototype.forEach.call(list,f);};
var tip=document.getElementById('tip');
function markOf(node){
  while(node&&node.nodeType===1){if(node.hasAttribute('data-tip'))return node;node=node.parentNode;}
  return null;
}
document.addEventListener('mousemove',function(e){
  var mark=markOf(e.target);
  if(!mark){tip.hidden=true;return;}
  tip.textContent=mark.getAttribute('data-tip');
  tip.hidden=false;
  tip.style.left=(e.pageX+14)+'px';tip.style.top=(e.pageY+14)+'px';
});
each(document.querySelectorAll('svg.chart'),function(svg){
  var home=svg.getAttribute('viewBox').split(' ').map(Number),view=home.slice(),drag=null;
  function apply(){svg.setAttribute('viewBox',view.join(' '));}
  function reset(){view=home.slice();apply();}
  function at(e){
    var r=svg.getBoundingClientRect();
    return [view[0]+(e.clientX-r.left)/r.width*view[2],view[1]+(e.clientY-r.top)/r.height*view[3]];
  }
  svg.addEventListener('wheel',function(e){
    e.preventDefault();
    var p=at(e),k=e.deltaY<0?0.8:1.25;
    if(view[2]*k>=home[2]){reset();return;}
    view=[p[0]-(p[0]-view[0])*k,p[1]-(p[1]-view[1])*k,view[2]*k,view[3]*k];
    apply();
  },{passive:false});
  svg.addEventListener('mousedown',function(e){drag={x:e.clientX,y:e.clientY,view:view.slice()};e.preventDefault();});
  window.addEventListener('mousemove',function(e){
    if(!drag)return;
    var r=svg.getBoundingClientRect();
    view[0]=drag.view[0]-(e.clientX-drag.x)/r.width*view[2];
    view[1]=drag.view[1]-(e.clientY-drag.y)/r.height*view[3];
    apply();
  });
  window.addEventListener('mouseup',function(){drag=null;});
  svg.addEventListener('dblclick',reset);
  var button=svg.previousElementSibling;
  if(button&&button.className==='reset'){button.addEventListener('click',reset);}
});
function key(cell){
  var v=cell?cell.getAttribute('data-v'):null;
  return v===null||v===''?NaN:parseFloat(v);
}
each(document.querySelectorAll('table.sortable'),function(table){
  var headers=table.tHead.rows[0].cells;
  each(headers,function(th,column){
    th.addEventListener('click',function(){
      var ascending=th.getAttribute('data-sort')!=='asc';
      each(headers,function(h){h.removeAttribute('data-sort');});
      th.setAttribute('data-sort',ascending?'asc':'desc');
      var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){
        var x=a.cells[column],y=b.cells[column],kx=key(x),ky=key(y),order;
        if(!isNaN(kx)&&!isNaN(ky))order=kx-ky;
        else if(!isNaN(kx)||!isNaN(ky))return isNaN(kx)?1:-1;
        else order=(x?x.textContent:'').localeCompare(y?y.textContent:'');
        return ascending?order:-order;
      });
      rows.forEach(function(row){body.appendChild(row);});
    });
  });
});
// Opened as report.html#selftest (the browser tests do), the page drives its own controls
// once and writes what happened into data-selftest on <body>: sorting, a tooltip, a wheel
// zoom and its reset, each "ok" or what went wrong.
function selftest(){
  var results=[];
  var table=null,column=-1;
  each(document.querySelectorAll('table.sortable'),function(t){
    if(table||t.tBodies[0].rows.length<2)return;
    each(t.tBodies[0].rows[0].cells,function(cell,c){if(column<0&&!isNaN(key(cell))){column=c;}});
    if(column>=0)table=t;else column=-1;
  });
  if(table){
    table.tHead.rows[0].cells[column].click();
    var keys=Array.prototype.map.call(table.tBodies[0].rows,function(r){return key(r.cells[column]);});
    var sorted=keys.every(function(k,i){return i===0||isNaN(k)||isNaN(keys[i-1])||keys[i-1]<=k;});
    results.push('sort='+(sorted?'ok':'unsorted'));
  }else{results.push('sort=no-table');}
  var mark=document.querySelector('svg.chart [data-tip]');
  if(mark){
    mark.dispatchEvent(new MouseEvent('mousemove',{bubbles:true,clientX:5,clientY:5}));
    results.push('tip='+(!tip.hidden&&tip.textContent===mark.getAttribute('data-tip')?'ok':'missing'));
  }else{results.push('tip=no-mark');}
  var svg=document.querySelector('svg.chart');
  if(svg){
    var before=svg.getAttribute('viewBox'),r=svg.getBoundingClientRect();
    svg.dispatchEvent(new WheelEvent('wheel',{bubbles:true,cancelable:true,deltaY:-100,
      clientX:r.left+r.width/2,clientY:r.top+r.height/2}));
    var zoomed=svg.getAttribute('viewBox');
    results.push('zoom='+(zoomed!==before&&Number(zoomed.split(' ')[2])<Number(before.split(' ')[2])?'ok':'unchanged'));
    svg.dispatchEvent(new MouseEvent('dblclick',{bubbles:true}));
    var numbers=function(box){return box.split(' ').map(Number).join(' ');};
    results.push('reset='+(numbers(svg.getAttribute('viewBox'))===numbers(before)?'ok':'kept-zoom'));
  }else{results.push('zoom=no-chart');}
  document.body.setAttribute('data-selftest',results.join(' '));
}
if(location.hash==='#selftest'){selftest();}
document.body.setAttribute('data-ready','1');
})();
)js";

}  // namespace fulcrum::report
