// holdline live demo: Talk. Browser voice over WebRTC (POST /v1/webrtc/offer) on the chat's
// own session, so chat and voice are one conversation. The `holdline` data channel carries
// the runtime's marks, clears and transcript lines (DESIGN §6d).
//
// Playback truth, and its approximation: a `mark` arrives when the audio before it has gone
// into the server's track; that audio reaches this page at once and plays after the
// receiver's jitter buffer. The page returns the mark after the jitter buffer's current
// delay (from getStats), which is when the audio element has played up to it within a few
// tens of milliseconds; a browser exposes no exact playout position of a WebRTC track. On
// a `clear`, every pending mark goes back at once (as Twilio does) and the audio element is
// muted for the jitter buffer's length, so the queued words are not heard.
"use strict";

const voice = {
  pc: null,
  channel: null,
  pending: new Map(), // mark name -> timer
  jitterMs: 80,
  statsTimer: null,
  energy: 0, // the agent's audio energy received so far (getStats totalAudioEnergy)
};

function setVoiceState(name) {
  $("voice").dataset.state = name;
  $("voice-state").textContent = name;
  $("talk").textContent = voice.pc ? "Hang up" : "Talk";
}

function voiceLine(role, text) {
  const item = el("li", role, `${role === "user" ? "you" : "agent"}: ${text}`);
  $("voice-transcript").append(item);
  item.scrollIntoView({ block: "nearest" });
}

function returnMark(name) {
  const timer = voice.pending.get(name);
  if (timer !== undefined) clearTimeout(timer);
  voice.pending.delete(name);
  if (voice.channel && voice.channel.readyState === "open") {
    voice.channel.send(JSON.stringify({ type: "mark", name }));
  }
}

function onVoiceFrame(frame) {
  if (frame.type === "mark") {
    voice.pending.set(frame.name, setTimeout(() => returnMark(frame.name), voice.jitterMs));
  } else if (frame.type === "clear") {
    [...voice.pending.keys()].forEach(returnMark);
    const audio = $("agent-audio");
    audio.muted = true;
    setTimeout(() => { audio.muted = false; }, voice.jitterMs);
    $("voice-interrupted").hidden = false;
    $("voice").dataset.interrupted = String(Number($("voice").dataset.interrupted || 0) + 1);
    setTimeout(() => { $("voice-interrupted").hidden = true; }, 2500);
  } else if (frame.type === "transcript") {
    voiceLine(frame.role, frame.text);
  }
}

async function watchStats() {
  if (!voice.pc) return;
  const stats = await voice.pc.getStats();
  stats.forEach((report) => {
    if (report.type !== "inbound-rtp" || report.kind !== "audio") return;
    if (report.jitterBufferEmittedCount > 0) {
      const ms = (1000 * report.jitterBufferDelay) / report.jitterBufferEmittedCount;
      voice.jitterMs = Math.max(20, Math.min(500, ms));
    }
    voice.energy = report.totalAudioEnergy || 0;
    $("voice").dataset.agentAudio = voice.energy.toFixed(4);
  });
}

function iceGathered(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === "complete") resolve(); };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, 3000); // host candidates come at once; do not wait on a slow STUN
  });
}

async function talk() {
  if (voice.pc) return hangUp();
  setVoiceState("asking for the microphone");
  let mic;
  try {
    mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
  } catch (err) {
    setVoiceState(`no microphone: ${err.message}`);
    return;
  }
  const pc = new RTCPeerConnection({ iceServers: [] });
  voice.pc = pc;
  mic.getTracks().forEach((track) => pc.addTrack(track, mic));
  const channel = pc.createDataChannel("holdline");
  voice.channel = channel;
  channel.onmessage = (message) => onVoiceFrame(JSON.parse(message.data));
  pc.ontrack = (event) => {
    const audio = $("agent-audio");
    audio.srcObject = event.streams[0] || new MediaStream([event.track]);
    audio.play().catch(() => {});
  };
  pc.onconnectionstatechange = () => {
    setVoiceState(pc.connectionState);
    if (["failed", "closed"].includes(pc.connectionState)) hangUp();
  };
  setVoiceState("connecting");
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await iceGathered(pc);
    const answer = await api("POST", "/v1/webrtc/offer", {
      sdp: pc.localDescription.sdp, type: "offer",
      session_id: state.session.session_id, token: state.session.token,
    });
    await pc.setRemoteDescription({ type: "answer", sdp: answer.sdp });
    $("voice").dataset.callId = answer.call_id;
    voice.statsTimer = setInterval(() => watchStats().catch(() => {}), 250);
  } catch (err) {
    hangUp();
    setVoiceState(`refused: ${err.message}`);
  }
}

function hangUp() {
  const pc = voice.pc;
  voice.pc = null;
  voice.channel = null;
  clearInterval(voice.statsTimer);
  voice.pending.forEach((timer) => clearTimeout(timer));
  voice.pending.clear();
  if (pc) {
    pc.getSenders().forEach((sender) => sender.track && sender.track.stop());
    pc.close();
  }
  setVoiceState("idle");
}

$("talk").addEventListener("click", () => talk());
