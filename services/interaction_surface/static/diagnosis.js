// holdline demo: the "Diagnosis" card. It asks the session's timeline for its diagnosis
// (services/interaction_surface/core/diagnosis.py) and shows each production question answered.
"use strict";

const DIAGNOSIS_QUESTIONS = [
  ["model_duplicated_a_request", "Did the model duplicate a request?"],
  ["request_repeated_in_a_later_turn", "Was a request repeated in a later turn?"],
  ["our_retries_sent_again", "Did our retries send it again (same idempotency key)?"],
  ["closing_said_before_commit", "Was a confirmation said before it committed?"],
  ["operation_ended_after_barge_in", "Did an operation end after a barge-in?"],
  ["handoff_lost_a_result", "Did a handoff suppress a result?"],
  ["unknown_left_unresolved", "Is an UNKNOWN still unresolved?"],
];

function diagnosisDetails(d) {
  const lines = [];
  d.duplicates.forEach((x) => lines.push(
    x.by === "retry" ? `${x.tool} ${x.operation_id}: ${x.attempts} attempts, one key`
      : x.by === "model" ? `${x.tool} ${x.operation_id}: named ${x.times}× in turn ${x.turn_id}`
      : x.by === "later_turn" ? `${x.tool} ${x.operation_id}: asked again in turn ${x.turn_id}`
      : `${x.tool}: one intent, operations ${x.operation_ids.join(", ")}`));
  d.unconfirmed_closings.forEach((c) => lines.push(
    `closing ${c.delivery_id} ${c.said}: ${c.said_before_terminal.length ? "said before " + c.said_before_terminal.join(", ") + " ended" : "about " + c.not_committed.join(", ") + " (not committed)"}`));
  d.after_barge_in.forEach((a) => lines.push(`${a.tool} ${a.operation_id} ended ${a.status} after the barge-in`));
  d.handoff_losses.forEach((h) => lines.push(`delivery ${h.delivery_id} suppressed: ${h.reason}`));
  d.unknown.forEach((u) => lines.push(`${u.tool} ${u.operation_id} UNKNOWN since ${u.since}: ${u.resolved ? "resolved " + u.resolution : "unresolved"} (${u.workers} worker${u.workers === 1 ? "" : "s"})`));
  return lines;
}

function renderDiagnosis(d) {
  const box = document.getElementById("diagnosis");
  if (!box) return;
  const list = el("ul", "diagnosis-answers");
  DIAGNOSIS_QUESTIONS.forEach(([key, question]) => {
    const yes = Boolean(d.answers[key]);
    const item = el("li", yes ? "yes" : "no");
    item.dataset.question = key;
    item.append(el("span", `status ${yes ? "s-unknown" : "s-committed"}`, yes ? "yes" : "no"), el("span", null, ` ${question}`));
    list.appendChild(item);
  });
  const details = diagnosisDetails(d);
  const more = el("ul", "diagnosis-details");
  details.forEach((line) => more.appendChild(el("li", "sub", line)));
  box.replaceChildren(list, more);
}

async function refreshDiagnosis() {
  if (typeof state === "undefined" || !state.session || document.hidden) return;
  try {
    const body = await api("GET", `/v1/sessions/${state.session.session_id}/timeline`);
    renderDiagnosis(body.diagnosis);
  } catch (err) {
    // The next tick tries again (the session may be switching).
  }
}

setInterval(refreshDiagnosis, 2500);
window.addEventListener("load", () => setTimeout(refreshDiagnosis, 500));
