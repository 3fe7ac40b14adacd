// Evaluates IAM requests against synthesized policies with @cloud-copilot/iam-simulate (a real evaluator:
// actions, ARNs with wildcards, every condition operator). Reads {identityPolicy, resourcePolicy, requests}
// as JSON on stdin (a request's principal "anonymous": an unsigned request) and prints one decision per request ("Allowed", "ImplicitlyDenied", "ExplicitlyDenied").
import { anonymousPrincipal, runSimulation } from '@cloud-copilot/iam-simulate'

const input = JSON.parse(await new Promise((resolve) => {
  let text = ''
  process.stdin.on('data', (chunk) => { text += chunk })
  process.stdin.on('end', () => resolve(text))
}))
const decisions = []
for (const request of input.requests) {
  const simulation = {
    identityPolicies: input.identityPolicy ? [{ name: 'policy', policy: input.identityPolicy }] : [],
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    resourcePolicy: input.resourcePolicy,
    request: {
      action: request.action,
      principal: request.principal === 'anonymous' ? anonymousPrincipal : request.principal,
      resource: { accountId: request.resourceAccount, resource: request.resource },
      contextVariables: request.context || {},
    },
  }
  const result = await runSimulation(simulation, {})
  decisions.push(result.errors ? `error: ${JSON.stringify(result.errors)}` : result.result.analysis.result)
}
console.log(JSON.stringify(decisions))
